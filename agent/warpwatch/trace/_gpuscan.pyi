from typing import Any

def scan(
    buf: bytes | bytearray, end: int, launch_type: type[Any], names: dict[str, str], dims: dict[Any, Any]
) -> tuple[list[Any], list[int], tuple[float, float] | None, float, float] | None: ...
