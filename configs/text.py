"""Text (IMDb byte-level classification) with any registered attention family (lra/attention/__init__.py).

``configs/text.py:family=NAME[,options]``, options as in the family's configs/text_<family>.py where it
has one: paper | cpu | smoke, key=value family options, flags, reference. ``family=luna,cpu`` builds the
same config as configs/text_luna.py:cpu (lra/family_configs.py; docs/adding_a_family.md).
"""

from lra.family_configs import generic_config


def get_config(arg: str | None = None):
    return generic_config("text", arg)
