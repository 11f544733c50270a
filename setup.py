# Only what pyproject.toml cannot say: gpulint.data holds no module, only data files
# (package-data in pyproject.toml); it is named because Python can import it (a namespace
# package) and setuptools warns of one left out.
from setuptools import find_packages, setup

setup(
    package_dir={"": "src"},
    packages=[*find_packages("src"), "gpulint.data"],
)
