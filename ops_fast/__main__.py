"""``python -m dynashape.ops_fast``: regenerate the indexes of the compiled-kernel plugins'
libraries (:mod:`.index` of ``fast`` and of ``onednn``)."""
from pathlib import Path

from dynashape.libindex import index_source
from dynashape.ops_fast import onednn
from dynashape.ops_fast.kernels import INDEX_COMMAND, family_modules

for package, modules in ((Path(__file__).parent, family_modules()),
                         (Path(onednn.__file__).parent, onednn.family_modules())):
    path = package / "index.py"
    path.write_text(index_source(modules, INDEX_COMMAND))
    print(f"wrote {path}")
