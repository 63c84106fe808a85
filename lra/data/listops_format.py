"""The ListOps format every part shares: token ids, classes, LRA's generator constants, file names, folders."""

from __future__ import annotations

from pathlib import Path

from lra.data.types import PAD_ID

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
# Fixed token ids: padding, the ten digits, the four operators, the closing bracket.
VOCAB: dict[str, int] = {
    "<pad>": PAD_ID,
    **{str(d): 1 + d for d in range(10)},
    **{op: 11 + i for i, op in enumerate(OPERATORS)},
    END: 15,
}
NUM_CLASSES = 10

MAX_DEPTH = 10  # LRA's generator constants
MAX_ARGS = 10
OPERATOR_P = 0.25

HEADER = "Source\tTarget"
SPLIT_FILES = {"train": "basic_train.tsv", "validation": "basic_val.tsv", "test": "basic_test.tsv"}
RELEASE_SUBDIR = Path("lra_release") / "listops-1000"
RELEASE_MAX_LEN = 2000  # the release keeps trees with fewer than 2000 tokens
GENERATED_SUBDIR = "listops_generated"
GENERATOR_VERSION = 1  # part of the cache folder name: bump when the generated data change
READER_VERSION = 1  # part of the token cache key: bump when the tokenisation changes
