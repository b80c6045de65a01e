"""The ``fm`` command line. Each command group lives in its own module, imported on demand."""
