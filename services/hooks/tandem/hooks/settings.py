"""The hooks gateway's configuration, from flags and environment."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.settings import Seconds, ServiceSettings, option


@dataclass(frozen=True)
class HooksSettings(ServiceSettings):
    """Tandem hooks gateway: HTTP API for Slurm prolog/epilog and placeholder scripts."""

    hooks_address: str = option(
        ":8000",
        flag="--hooks-api-bind-address",
        env="TANDEM_HOOKS_API_BIND_ADDRESS",
        help="HTTP listen address of the hooks API",
    )
    syncer_address: str = option(
        "tandem-syncer:50052",
        flag="--syncer-address",
        env="TANDEM_SYNCER_ADDRESS",
        help="the syncer's gRPC address",
    )
    token_file: str = option(
        "",
        flag="--hooks-token-file",
        env="TANDEM_HOOKS_TOKEN_FILE",
        help="file holding the bearer token callers must present",
    )
    token: str = option(
        "", flag="--hooks-token", env="TANDEM_HOOKS_TOKEN", help="the bearer token (when no file is given)"
    )
    call_timeout: Seconds = option(
        Seconds(55.0),
        flag="--call-timeout",
        env="TANDEM_HOOKS_CALL_TIMEOUT",
        help="longest a hook call waits for the syncer",
    )

    def bearer_token(self) -> str:
        if self.token_file:
            with open(self.token_file) as f:
                return f.read().strip()
        return self.token
