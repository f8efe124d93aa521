#!/usr/bin/env python3
"""A minimal CSI plugin on Python's grpcio, for interoperability tests of nodeward's CSI client.

Usage: py_csi_plugin.py <socket path or unix:// endpoint> <mode> [<volume root>]
  mode: healthy (ready=true), ready-absent (no ready field), not-ready (ready=false),
        publish (ready=true, and NodePublishVolume bind-mounts <volume root>/<volume id> at the
        target, which NodeUnpublishVolume unmounts and removes; needs root)

It serves Identity.Probe, Identity.GetPluginInfo, Identity.GetPluginCapabilities,
Node.NodeGetInfo, Controller.CreateVolume (the volume ID is "py-" and the request's name, read from
its field 1), Controller.DeleteVolume and Node.NodePublishVolume (which fails with
FailedPrecondition "py plugin refuses to publish" but in mode publish), Node.NodeUnpublishVolume,
Node.NodeGetCapabilities (none) and, in mode publish, Controller.ControllerGetCapabilities
(CREATE_DELETE_VOLUME), with the protobuf encoding written out by hand
(field numbers from the CSI spec), so it needs only the `grpcio` package: no generated code, no
protoc. Anything else is Unimplemented.
It stops cleanly on SIGINT or SIGTERM.
"""

import os
import signal
import subprocess
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


def fields(message):
    """The length-delimited fields of a message: number -> bytes (the last one wins)."""
    out, i = {}, 0
    while i < len(message):
        key, i = read_varint(message, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = read_varint(message, i)
        elif wire == 2:
            n, i = read_varint(message, i)
            out[number] = message[i : i + n]
            i += n
        else:
            raise ValueError("unexpected wire type %d" % wire)
    return out


def read_varint(data, i):
    n, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def is_mount(path):
    """Whether `path` is a mount point. os.path.ismount compares devices, which a bind mount of a
    directory of the same filesystem does not change."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split(" ")[4] == path for line in f)


def probe_response(mode):
    if mode == "ready-absent":
        return b""
    if mode == "not-ready":
        # BoolValue{value=false} encodes as an empty message, but it is present.
        return field_bytes(1, b"")
    return field_bytes(1, field_varint(1, 1))


def main():
    socket_path, mode = sys.argv[1], sys.argv[2]
    root = sys.argv[3] if len(sys.argv) > 3 else None
    for prefix in ("unix://", "unix:"):
        if socket_path.startswith(prefix):
            socket_path = socket_path[len(prefix) :]
            break

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
        if root:
            os.makedirs(os.path.join(root, "py-" + name), exist_ok=True)
        # Volume{capacity_bytes=1, volume_id=2, volume_context=3, accessible_topology=5}
        volume = (
            field_varint(1, 4096)
            + field_bytes(2, ("py-" + name).encode())
            + string_map_entry(3, "made-by", "python")
            + field_bytes(5, string_map_entry(1, "zone", "z1"))
        )
        return field_bytes(1, volume)

    def publish(request, context):
        if mode != "publish":
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "py plugin refuses to publish")
        f = fields(request)
        # NodePublishVolumeRequest: volume_id = 1, target_path = 4.
        volume, target = f.get(1, b"").decode(), f.get(4, b"").decode()
        if not volume or not target.startswith("/"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "py plugin: no volume_id or target_path")
        os.makedirs(target, exist_ok=True)
        if not is_mount(target):
            done = subprocess.run(["mount", "--bind", os.path.join(root, volume), target])
            if done.returncode != 0:
                context.abort(grpc.StatusCode.INTERNAL, "py plugin: mount --bind failed")
        return b""

    def unpublish(request, context):
        f = fields(request)
        # NodeUnpublishVolumeRequest: volume_id = 1, target_path = 2.
        target = f.get(2, b"").decode()
        if is_mount(target):
            if subprocess.run(["umount", target]).returncode != 0:
                context.abort(grpc.StatusCode.INTERNAL, "py plugin: umount failed")
        if os.path.isdir(target):
            os.rmdir(target)
        return b""

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
            "NodeGetCapabilities": unary(b""),
            "NodePublishVolume": grpc.unary_unary_rpc_method_handler(publish),
            "NodeUnpublishVolume": grpc.unary_unary_rpc_method_handler(unpublish),
        },
    )
    controller = grpc.method_handlers_generic_handler(
        "csi.v1.Controller",
        {
            "CreateVolume": grpc.unary_unary_rpc_method_handler(create_volume),
            "DeleteVolume": unary(b""),
        },
    )
    if mode == "publish":
        # What the agent's supervisor asks of a plugin task: ControllerServiceCapability{rpc{
        # type=CREATE_DELETE_VOLUME}}, and no node capability (no staging).
        controller = grpc.method_handlers_generic_handler(
            "csi.v1.Controller",
            {
                "CreateVolume": grpc.unary_unary_rpc_method_handler(create_volume),
                "DeleteVolume": unary(b""),
                "ControllerGetCapabilities": unary(
                    field_bytes(1, field_bytes(1, field_varint(1, 1)))
                ),
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
