"""Homomorphic encryption for secinfer: a typed Python API over Lattigo v6 (Go, c-shared).

The Lattigo library is built by ``python -m secinfer.crypto.he.build`` (the Makefile's
``native`` target) and, failing that, on first use when the library is missing or older
than the Go sources. See docs/he.md.

    from secinfer.crypto import he
    P = he.get_params("ckks-n13-128")
    with P.keygen() as kp:
        ct = P.encrypt([1 + 2j, 3], kp.pk)
"""

from secinfer.crypto.he.errors import (
    HEArgumentError, HEClosedError, HEError, HEInternalError, HENativeBuildError,
    HESerializationError, ParameterMismatchError,
)
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.linear import DiagonalTransform, LinearPlan, conv2d_coo, conv2d_plan
from secinfer.crypto.he.objects import (
    Ciphertext, EvalKeys, HEObject, LWEBatch, Plaintext, PublicKey, SecretKey,
)
from secinfer.crypto.he.params import (
    PARAMETER_SETS, SECURE_SETS, CKKSParams, KeyPair, ParamSpec, get_params,
)
from secinfer.crypto.he.rlwe import (
    EncryptionRandomness, coeff_decode, coeff_decrypt, coeff_encode, coeff_encrypt,
    encrypt_with_randomness, expand, extract_lwe, flood, flooding_log_bound, lwe_decrypt,
    lwe_from_arrays, noise, pack_lwe, spread_positions, trace,
)
from secinfer.crypto.he.trimmed import decrypt_trimmed, trim, trimmed_size
from secinfer.crypto.he import packing  # SAFHIRE: extraction, exact LWE linear layers, fast packing

__all__ = [
    "HEError", "HEArgumentError", "HEClosedError", "HEInternalError", "HENativeBuildError",
    "HESerializationError", "ParameterMismatchError", "Evaluator", "DiagonalTransform",
    "LinearPlan", "conv2d_coo", "conv2d_plan", "Ciphertext", "EvalKeys", "HEObject",
    "LWEBatch", "Plaintext", "PublicKey", "SecretKey", "PARAMETER_SETS", "SECURE_SETS",
    "CKKSParams", "KeyPair", "ParamSpec", "get_params", "EncryptionRandomness",
    "coeff_decode", "coeff_decrypt", "coeff_encode", "coeff_encrypt",
    "encrypt_with_randomness", "expand", "extract_lwe", "flood", "flooding_log_bound",
    "lwe_decrypt", "lwe_from_arrays", "noise", "pack_lwe", "spread_positions", "trace",
    "decrypt_trimmed", "trim", "trimmed_size", "packing",
]
