"""Image (CIFAR-10 grey pixels) with any registered attention family (lra/attention/__init__.py).

``configs/image.py:family=NAME[,options]``, options as in the family's configs/image_<family>.py where it
has one: paper | cpu | smoke, key=value family options, flags, reference. ``family=luna,cpu`` builds the
same config as configs/image_luna.py:cpu (lra/family_configs.py; docs/adding_a_family.md).
"""

from lra.family_configs import generic_config


def get_config(arg: str | None = None):
    return generic_config("image", arg)
