# One image for the three services; the chart runs tandem-scheduler, tandem-syncer and tandem-hooks
# from it (values: global.image). Build from the repository root:
#   docker build -t registry.example.com/tandem:0.1.0 .
# The gRPC stubs are generated while the wheel is built (hatch_build.py), so nothing generated
# needs to be in the context. tests/unit/test_packaging.py checks that such a wheel is complete.
FROM python:3.12-slim AS wheel
WORKDIR /src
COPY pyproject.toml hatch_build.py ./
COPY proto proto
COPY libs libs
COPY services services
COPY cli cli
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.12-slim
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# The chart's securityContext: non-root 65532, read-only root filesystem (it mounts /tmp).
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
CMD ["tandem-scheduler", "--help"]
