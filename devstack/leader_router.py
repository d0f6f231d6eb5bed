"""The lab's stand-in for the syncer's Service with two replicas: in a cluster the Service sends
calls only to the Pod labelled leader; here each new connection goes to the replica whose process
holds the syncer's Lease (its identity is `<hostname>_<pid>`), read every half second.

    python -m devstack.leader_router --listen 127.0.0.1:P --kubeconfig K --lease NS/NAME \\
        --backend RUN_DIR/tandem-syncer.pid=127.0.0.1:A --backend ...
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from pathlib import Path

from tandem.kube import KubeClient, KubeError

log = logging.getLogger("leader-router")
REFRESH_S = 0.5


class Router:
    def __init__(self, kube: KubeClient, lease: str, backends: dict[Path, str]) -> None:
        namespace, name = lease.split("/", 1)
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.backends = backends
        self.leader: str | None = None

    def _read(self) -> str | None:
        try:
            holder = str(((self.kube.get(self.path).get("spec") or {}).get("holderIdentity")) or "")
        except KubeError:
            return None
        pid = holder.rsplit("_", 1)[-1]
        for pid_file, address in self.backends.items():
            with contextlib.suppress(OSError):
                if pid_file.read_text().split()[:1] == [pid]:  # "<pid> <start time>"
                    return address
        return None

    async def watch(self) -> None:
        while True:
            leader = await asyncio.to_thread(self._read)
            if leader != self.leader:
                log.warning("syncer leader: %s", leader or "none")
                self.leader = leader
            await asyncio.sleep(REFRESH_S)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = self.leader
        if target is None:
            writer.close()  # no leader: the caller's channel tries again, as with no ready endpoint
            return
        host, port = target.rsplit(":", 1)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main_async(args: argparse.Namespace) -> None:
    backends = {Path(b.split("=", 1)[0]): b.split("=", 1)[1] for b in args.backend}
    router = Router(KubeClient.from_kubeconfig(args.kubeconfig), args.lease, backends)
    host, port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(router.serve, host, int(port))
    async with server:
        await asyncio.gather(router.watch(), server.serve_forever())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--listen", required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--lease", required=True, help="NAMESPACE/NAME")
    parser.add_argument("--backend", action="append", default=[], help="PID_FILE=HOST:PORT")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
