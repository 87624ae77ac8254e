"""``python -m dynashape.ops_builtin``: regenerate the family index (:mod:`.index`)."""
from pathlib import Path

from dynashape.libindex import write_index
from dynashape.ops_builtin import INDEX_COMMAND, family_modules

write_index(Path(__file__).with_name("index.py"), family_modules(), INDEX_COMMAND)
