"""A Service's cluster IP as kube-proxy makes it: accept on `LISTEN_IP:PORT`, relay to the pod.

Usage: forward.py LISTEN_IP PORT TARGET_IP TARGET_PORT (run inside the job's network).
"""

import asyncio
import contextlib
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.close()


async def serve(listen_ip: str, port: int, target_ip: str, target_port: int) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(target_ip, target_port)
        except OSError:
            writer.close()  # as a Service without a ready endpoint: the connection is refused
            return
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(relay, listen_ip, port)
    print(f"forwarding {listen_ip}:{port} to {target_ip}:{target_port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
