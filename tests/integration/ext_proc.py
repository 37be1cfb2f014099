"""The gateway's side of Envoy's ext_proc protocol, as little as the endpoint picker needs.

The test harness stands where a gateway would: it sends a request's headers and body to the
picker over ``envoy.service.ext_proc.v3.ExternalProcessor/Process`` (a bidirectional gRPC
stream) and reads back the endpoint it picked, the ``x-gateway-destination-endpoint`` header
mutation. The messages are written in the protobuf wire format by hand (a few fields of
envoy/service/ext_proc/v3/external_processor.proto and envoy/config/core/v3/base.proto), so
no generated code is needed: only grpcio.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc  # type: ignore[import-untyped]

__all__ = ["DESTINATION_HEADER", "pick_endpoint"]

DESTINATION_HEADER = "x-gateway-destination-endpoint"
_METHOD = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _bool(number: int, value: bool) -> bytes:
    return _varint(number << 3) + _varint(int(value)) if value else b""


def _headers_request(headers: dict[str, str]) -> bytes:
    # HeaderValue{key=1, raw_value=3}; HeaderMap{headers=1}; HttpHeaders{headers=1,
    # end_of_stream=3}; ProcessingRequest{request_headers=2}.
    values = b"".join(
        _field(1, _field(1, k.encode()) + _field(3, v.encode())) for k, v in headers.items()
    )
    return _field(2, _field(1, values) + _bool(3, False))


def _body_request(body: bytes) -> bytes:
    # HttpBody{body=1, end_of_stream=2}; ProcessingRequest{request_body=4}.
    return _field(4, _field(1, body) + _bool(2, True))


def _parse(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message's top-level fields."""
    fields: list[tuple[int, int, Any]] = []
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, i = _read_varint(data, i)
        elif wire == 2:
            size, i = _read_varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise ValueError(f"unexpected wire type {wire}")
        fields.append((number, wire, value))
    return fields


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _set_headers(response: bytes) -> dict[str, str]:
    """The header mutations of a ProcessingResponse's request_headers (1) or request_body (3):
    HeadersResponse/BodyResponse{response=1: CommonResponse{header_mutation=2:
    HeaderMutation{set_headers=1: HeaderValueOption{header=1: HeaderValue{key=1, value=2,
    raw_value=3}}}}}."""
    found: dict[str, str] = {}
    for number, _, outer in _parse(response):
        if number not in (1, 3):
            continue
        for n1, _, common in _parse(outer):
            if n1 != 1:
                continue
            for n2, _, mutation in _parse(common):
                if n2 != 2:
                    continue
                for n3, _, option in _parse(mutation):
                    if n3 != 1:
                        continue
                    for n4, _, header in _parse(option):
                        if n4 != 1:
                            continue
                        parts = {n: v for n, _, v in _parse(header)}
                        value = parts.get(3) or parts.get(2) or b""
                        found[parts.get(1, b"").decode()] = value.decode()
    return found


def pick_endpoint(target: str, model: str, prompt: str, timeout: float = 10.0) -> str:
    """The ``ip:port`` the picker at ``target`` (host:port, plaintext) chooses for one
    completion request for ``model``."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 8}).encode()
    headers = {
        ":method": "POST",
        ":path": "/v1/completions",
        ":authority": "gateway.local",
        "content-type": "application/json",
        "content-length": str(len(body)),
    }

    def requests() -> Iterator[bytes]:
        yield _headers_request(headers)
        yield _body_request(body)

    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(
            _METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        for response in call(requests(), timeout=timeout):
            picked = _set_headers(response).get(DESTINATION_HEADER)
            if picked:
                return picked
    raise AssertionError("the endpoint picker answered without a destination endpoint")
