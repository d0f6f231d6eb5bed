# One image for the three services; the chart runs tandem-scheduler, tandem-syncer and tandem-hooks
# from it (values: global.image). Build from the repository root:
#   docker build -t registry.example.com/tandem:0.1.0 .
# The gRPC stubs are generated while the wheel is built (hatch_build.py), so nothing generated
# needs to be in the context. tests/unit/test_packaging.py checks that such a wheel is complete.
# The lab builds the same image without a Docker daemon (devstack/image.py, `make image`): on a
# Debian bookworm root of its own, with this file's USER, ENV and CMD, read from here.
# Python 3.11: the release the tests run on. Pin the base by digest in your registry
# (--build-arg PYTHON_IMAGE=python:3.11-slim@sha256:...): this lab reaches no image registry.
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml hatch_build.py ./
COPY proto proto
COPY libs libs
COPY services services
COPY cli cli
# Which commit this is, for tandem_build_info (the context has no .git):
#   --build-arg TANDEM_COMMIT=$(git rev-parse HEAD) --build-arg TANDEM_DIRTY=false
ARG TANDEM_COMMIT=
ARG TANDEM_DIRTY=unknown
# Only Tandem's own wheel here: its dependencies come from the lock below, hashes checked.
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
COPY requirements.lock /tmp/requirements.lock
RUN pip install --no-cache-dir --require-hashes -r /tmp/requirements.lock && rm /tmp/requirements.lock
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir --no-deps /wheels/*.whl && rm -rf /wheels
# The chart's securityContext: non-root 65532, read-only root filesystem (it mounts /tmp).
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
CMD ["tandem-scheduler", "--help"]
