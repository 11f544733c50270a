# Only what pyproject.toml cannot say: the rule modules live at the top of the repository, in
# rules/, and install as the package gpulint.rules beside everything found under src/.
# gpulint.data holds no module, only data files (package-data in pyproject.toml); it is named
# because Python can import it (a namespace package) and setuptools warns of one left out.
from setuptools import find_packages, setup

setup(
    package_dir={"": "src", "gpulint.rules": "rules"},
    packages=[*find_packages("src"), "gpulint.data", "gpulint.rules"],
)
