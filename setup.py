"""The one C extension (`proxy.capture._snapped`, the capture writer's header-only packets); the
rest of the project's metadata is in pyproject.toml. A machine without a C compiler fails the
install (pip prints the compiler's error): the extension is not optional there. A source tree run
without an install (PYTHONPATH) has no extension until `python setup.py build_ext --inplace`, and
the writer then uses the Python builder (`proxy.capture.snapped`)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "proxy.capture._snapped",
            sources=["proxy/capture/_snapped.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
        )
    ]
)
