"""A file-system refusal inside a Spark task comes back to the driver as kg's own one-line error.

No Spark is started: the task-side wrapper and the driver's recovery are the two ends of one message.
"""

from __future__ import annotations

import errno
import re

import pytest

from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.execution.engines.spark import errors as spark


def _raised_in_task(exc: BaseException) -> RuntimeError:
    with pytest.raises(RuntimeError) as caught, spark.naming_kg_errors():
        raise exc
    return caught.value


def _recovered(message: str) -> tuple[type | None, str, str]:
    named = re.search(rf"{spark.TASK_ERROR}:(\w+):(\w+):([^\n]*)", message)
    assert named is not None, message
    return spark.TASK_ERRORS.get(named.group(1)), named.group(2), named.group(3)


def test_no_space_in_a_task_is_exit_5_no_space_left() -> None:
    error = _raised_in_task(OSError(errno.ENOSPC, "No space left on device", "/out/part-0"))
    kind, code, message = _recovered(str(error))
    assert kind is ExecutionError and code == "NO_SPACE_LEFT"
    assert "no space left" in message and "\n" not in message


def test_an_os_error_kg_does_not_know_stays_a_task_failure() -> None:
    # EBADF is a bug, not the environment: it must not be dressed as a clean exit 5.
    with pytest.raises(OSError), spark.naming_kg_errors():
        raise OSError(errno.EBADF, "Bad file descriptor")
