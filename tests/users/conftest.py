import pytest

pytest.importorskip("skl2onnx")
pytest.importorskip("onnxruntime")
