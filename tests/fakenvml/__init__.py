"""The fake libnvidia-ml.so.1 (fakenvml.c) and the helpers tests use to build and drive it."""
