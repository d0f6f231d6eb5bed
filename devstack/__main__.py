"""`python -m devstack up|down|status|build|tools|lint-tools|real-node-tools|image|demo`: the
local stack's command line (see Makefile)."""

from __future__ import annotations

import sys

from devstack import stack, tools
from devstack.config import StackConfig


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "status"
    cfg = StackConfig.from_env()
    if command == "build":
        stack.build(cfg)
        return 0
    if command == "tools":
        tools.ensure_tools(cfg.bin_dir, tools.lab_tools(cfg.kubernetes_version))
        return 0
    if command == "lint-tools":
        tools.ensure_tools(cfg.bin_dir, tools.LINT_TOOLS)
        return 0
    if command == "real-node-tools":
        from devstack import pause

        tools.ensure_tools(cfg.bin_dir, tools.real_node_tools(cfg.kubernetes_version))
        print(f"pause image: {pause.ensure_image()}")
        return 0
    if command == "image":
        from devstack import image

        print(f"image: {image.image_name(image.key())} in {image.ensure_image()}")
        return 0
    if command == "up":
        seconds = stack.up(cfg)
        print(stack.summary(cfg))
        print(f"\nstack up in {seconds:.1f}s ({cfg.nodes} nodes)")
        return 0
    if command == "down":
        stopped = stack.down(cfg)
        print(f"stopped {len(stopped)} processes" if stopped else "nothing was running")
        return 0
    if command == "status":
        rows, total = stack.status(cfg)
        dead = [name for name, state, _ in rows if state == "DIED"]
        for name, state, rss in rows:
            print(f"{name:24} {state:8} {rss / 1024:8.1f} MiB")
        print(f"{'total':24} {'':8} {total / 1024:8.1f} MiB")
        if dead:
            print(f"died: {', '.join(dead)}", file=sys.stderr)
            return 1
        return 0
    if command == "demo":
        from devstack import demo

        # A fresh machine's demo starts once the parts it shows are built; Kueue's and LWS's
        # controllers join at the next `make up` (issue 51).
        seconds = stack.up_as_built(cfg)
        print(stack.summary(cfg))
        print(f"\nstack up in {seconds:.1f}s ({cfg.nodes} nodes)")
        if not stack.late_controllers_built():
            print("Kueue's and LWS's controllers are not built yet: `make up` builds and starts them")
        return demo.run(cfg)
    print(
        f"unknown command {command!r}; use up, down, status, build, tools, lint-tools, real-node-tools, image"
        " or demo",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
