"""The producer's native send loop (brokerbench.native._sendloop), built against librdkafka's header.

`make setup` builds it in place (`python setup.py build_ext --inplace`) once the header is installed
(Debian: librdkafka-dev). It is optional: without it the worker runs its Python send loop.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "brokerbench.native._sendloop",
    sources=["functions/brokerbench/native/sendloop.c"],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
    libraries=["dl"],
    optional=True,
)])
