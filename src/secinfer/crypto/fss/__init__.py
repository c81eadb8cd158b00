"""Function secret sharing: DPF, DCF and the gates CRISP needs (see docs/fss.md).

* ``dpf`` -- Boyle-Gilboa-Ishai distributed point function [BGI16].
* ``dcf`` -- distributed comparison function of Boyle et al. [BCG+21 Fig. 1].
* ``gates`` -- sign / ReLU / arithmetic-right-shift gates on masked inputs, each with a
  MAC twin for CRISP [CRISP Alg. 1-2, Fig. 1], declared costs, one online round.
* ``bench.run()`` -- key generation and evaluation timings.
"""

from secinfer.crypto.fss.dcf import DCFKeys, DCFParams, dcf_eval, dcf_gen
from secinfer.crypto.fss.dpf import DPFKeys, DPFParams, dpf_eval, dpf_eval_all, dpf_gen
from secinfer.crypto.fss.gates import (ArsGate, FSSGate, GateCost, GateKey, ReluGate, SignGate,
                                       make_gate, wire_dtype)

__all__ = ["ArsGate", "DCFKeys", "DCFParams", "DPFKeys", "DPFParams", "FSSGate", "GateCost", "GateKey",
           "ReluGate", "SignGate", "dcf_eval", "dcf_gen", "dpf_eval", "dpf_eval_all", "dpf_gen",
           "make_gate", "wire_dtype"]
