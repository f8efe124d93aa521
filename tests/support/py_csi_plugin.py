#!/usr/bin/env python3
"""A minimal CSI plugin on Python's grpcio, for interoperability tests of nodeward's CSI client.

Usage: py_csi_plugin.py <socket path> <mode>
  mode: healthy (ready=true), ready-absent (no ready field), not-ready (ready=false)

It serves Identity.Probe, Identity.GetPluginInfo, Identity.GetPluginCapabilities,
Node.NodeGetInfo, Controller.CreateVolume (the volume ID is "py-" and the request's name, read from
its field 1), Controller.DeleteVolume and Node.NodePublishVolume (which fails with
FailedPrecondition "py plugin refuses to publish") with the protobuf encoding written out by hand
(field numbers from the CSI spec), so it needs only the `grpcio` package: no generated code, no
protoc. Anything else is Unimplemented.
It stops cleanly on SIGINT or SIGTERM.
"""

import os
import signal
import sys
import threading
from concurrent import futures

import grpc


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_bytes(number, payload):
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def field_varint(number, value):
    return varint(number << 3) + varint(value)


def string_map_entry(number, key, value):
    return field_bytes(number, field_bytes(1, key.encode()) + field_bytes(2, value.encode()))


def probe_response(mode):
    if mode == "ready-absent":
        return b""
    if mode == "not-ready":
        # BoolValue{value=false} encodes as an empty message, but it is present.
        return field_bytes(1, b"")
    return field_bytes(1, field_varint(1, 1))


def main():
    socket_path, mode = sys.argv[1], sys.argv[2]

    plugin_info = (
        field_bytes(1, b"py.nodeward.test")
        + field_bytes(2, b"0.9")
        + string_map_entry(3, "impl", "python-grpcio")
    )
    # PluginCapability{service{type=CONTROLLER_SERVICE}}
    plugin_caps = field_bytes(1, field_bytes(1, field_varint(1, 1)))
    node_info = (
        field_bytes(1, b"py-node")
        + field_varint(2, 300)
        + field_bytes(3, string_map_entry(1, "zone", "z1"))
    )

    def unary(reply):
        return grpc.unary_unary_rpc_method_handler(lambda request, context: reply)

    def create_volume(request, context):
        # CreateVolumeRequest.name is field 1: tag 0x0a, then a one-byte length for short names.
        if len(request) < 2 or request[0] != 0x0A or request[1] > 127:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "py plugin: no name in field 1")
        name = request[2 : 2 + request[1]].decode()
        # Volume{capacity_bytes=1, volume_id=2, volume_context=3, accessible_topology=5}
        volume = (
            field_varint(1, 4096)
            + field_bytes(2, ("py-" + name).encode())
            + string_map_entry(3, "made-by", "python")
            + field_bytes(5, string_map_entry(1, "zone", "z1"))
        )
        return field_bytes(1, volume)

    def refuse_publish(request, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "py plugin refuses to publish")

    identity = grpc.method_handlers_generic_handler(
        "csi.v1.Identity",
        {
            "Probe": unary(probe_response(mode)),
            "GetPluginInfo": unary(plugin_info),
            "GetPluginCapabilities": unary(plugin_caps),
        },
    )
    node = grpc.method_handlers_generic_handler(
        "csi.v1.Node",
        {
            "NodeGetInfo": unary(node_info),
            "NodePublishVolume": grpc.unary_unary_rpc_method_handler(refuse_publish),
        },
    )
    controller = grpc.method_handlers_generic_handler(
        "csi.v1.Controller",
        {
            "CreateVolume": grpc.unary_unary_rpc_method_handler(create_volume),
            "DeleteVolume": unary(b""),
        },
    )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((identity, node, controller))
    server.add_insecure_port("unix:" + socket_path)
    server.start()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=None)
    try:
        os.unlink(socket_path)
    except FileNotFoundError:
        pass


if __name__ == "__main__":
    main()
