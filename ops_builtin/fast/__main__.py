"""``python -m dynashape.ops_builtin.fast``: regenerate the indexes of the compiled-kernel plugins'
libraries (:mod:`.index` of ``fast`` and of ``onednn``)."""
from pathlib import Path

from dynashape.libindex import write_index
from dynashape.ops_builtin.fast import onednn
from dynashape.ops_builtin.fast.kernels import INDEX_COMMAND, family_modules

write_index(Path(__file__).with_name("index.py"), family_modules(), INDEX_COMMAND)
write_index(Path(onednn.__file__).with_name("index.py"), onednn.family_modules(), INDEX_COMMAND)
