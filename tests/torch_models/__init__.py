"""PyTorch model implementations for the importer's tests (written here, no torchvision).

Each module has ``build(**sizes) -> (module, example_args)``, the form
``pase import FILE.py:FUNCTION`` expects, with small default sizes.
"""
