"""Python trainer client for a Stepwise DataPool (stdlib only; uses NumPy when installed).

    from stepwise_client import StepwiseClient

    client = StepwiseClient("http://127.0.0.1:8100", api_key="...")
    with client.lease(8, n_rollouts=4, advantage="grpo", wait_ms=30_000) as batch:
        input_ids = batch["input_ids"]  # (B, P+R) int32, a view of the response bytes
        ...                             # acked when the block succeeds, nacked when it raises

Set `STEPWISE_NO_NUMPY=1` to use the pure-Python arrays (`NpyArray`) even when NumPy is present.
"""

from .client import Advantage, Batch, BatchFormat, Overlong, StepwiseClient
from .errors import StepwiseConnectionError, StepwiseError, StepwiseFormatError
from .npz import HAVE_NUMPY, NpyArray, read_padded, read_zip_directory
from .wire import AgentHeaders, BatchJson, LeaseHeaders, RowsBatchJson

__version__ = "0.1.0"

__all__ = [
    "HAVE_NUMPY",
    "Advantage",
    "AgentHeaders",
    "Batch",
    "BatchFormat",
    "BatchJson",
    "LeaseHeaders",
    "NpyArray",
    "Overlong",
    "RowsBatchJson",
    "StepwiseClient",
    "StepwiseConnectionError",
    "StepwiseError",
    "StepwiseFormatError",
    "read_padded",
    "read_zip_directory",
]
