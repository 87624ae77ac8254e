"""``python -m dynashape.ops_builtin``: regenerate the family index (:mod:`.index`)."""
from pathlib import Path

from dynashape.libindex import index_source
from dynashape.ops_builtin import INDEX_COMMAND, family_modules

path = Path(__file__).with_name("index.py")
path.write_text(index_source(family_modules(), INDEX_COMMAND))
print(f"wrote {path}")
