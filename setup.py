# Only what pyproject.toml cannot say: the rule modules live at the top of the repository, in
# rules/, and install as the package gpulint.rules beside everything found under src/.
from setuptools import find_packages, setup

setup(
    package_dir={"": "src", "gpulint.rules": "rules"},
    packages=[*find_packages("src"), "gpulint.rules"],
)
