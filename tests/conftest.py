import shutil

import pytest


def pytest_collection_modifyitems(config, items):
    """GPU tests run only where CUDA GPUs are (`pytest -m gpu` on the GPU machine)."""
    try:
        import torch

        have_gpu = torch.cuda.is_available()
    except ImportError:
        have_gpu = False
    if have_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def topowise_bin():
    return shutil.which("topowise")
