"""Build hook for cohort's optional C extension; everything else is in pyproject.toml.

`optional=True`: where no C compiler or Python headers are available the install still succeeds
and cohort runs its pure-Python code instead (`cohort.assignors._uniform_homogeneous`).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cohort.assignors._uniform_native",
            ["src/cohort/assignors/_uniform_native.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ],
)
