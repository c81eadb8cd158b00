"""secinfer: private machine-learning inference behind one model format and one runtime."""

__version__ = "0.1.0"
