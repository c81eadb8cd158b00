"""Option ``input_phase`` (benchmark accounting): the input shared before the online phase
gives the same output with exactly the input's round and bytes moved out of the online
meters, for STAMP and Falcon+ alike; an unknown value is refused."""

import numpy as np
import pytest

from secinfer.errors import ProtocolError
from secinfer.ir.onnx_import import load_model
from secinfer.ir.zoo import build
from secinfer.bench.stamp_bench import _input, run_protocol
from secinfer.protocols.rep3.graph import input_phase


@pytest.mark.parametrize("protocol", ["stamp", "falcon"])
@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_sharing_the_input_offline_moves_only_the_input(protocol, security):
    graph = load_model(build("secureml-a", seed=0, batch=2))
    x = _input(graph, 2, 0)
    on = run_protocol(protocol, graph, x, security)
    off = run_protocol(protocol, graph, x, security, options={"input_phase": "offline"})
    assert np.array_equal(on["output"], off["output"])
    # STAMP's first layer waits for the input's round; semi-honest Falcon+'s does not (the
    # owner, party 1, sends its first truncation message at once, beside the input share)
    want = on["rounds"] if (protocol, security) == ("falcon", "semi-honest") else on["rounds"] - 1
    assert off["rounds"] == want
    moved = sum(on["bytes_sent"]) - sum(off["bytes_sent"])
    assert moved > 0 and sum(off["offline_bytes_sent"]) - sum(on["offline_bytes_sent"]) == moved


def test_unknown_input_phase_is_refused():
    assert input_phase({}) == "online"
    with pytest.raises(ProtocolError, match="input_phase"):
        input_phase({"input_phase": "later"})
