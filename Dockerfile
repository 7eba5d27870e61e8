# `saggar serve` in a container: the KServe v2 / Open Inference Protocol on ports 8000 (HTTP), 8001
# (gRPC) and 8002 (metrics), serving the model repository mounted at /models.
#
#   docker build -t saggar .
#   docker run --gpus all -v $PWD/models:/models -p 8000-8002:8000-8002 saggar
#
# The CUDA backend loads libcuda, NVRTC and cuBLASLt at run time, so the build needs no CUDA toolkit;
# the runtime image is CUDA's runtime image (NVRTC and cuBLASLt), and libcuda comes from the NVIDIA
# container runtime (`--gpus`). Without a GPU the server falls back to the host backend (`--backend
# host` makes that explicit). The compile cache is /var/cache/saggar: mount a volume there to keep
# compiled buckets across restarts, or seed it with `saggar cache import` (docs/serving.md).

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p saggar-cli --bin saggar

FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04
COPY --from=build /src/target/release/saggar /usr/local/bin/saggar
RUN mkdir -p /models /var/cache/saggar
EXPOSE 8000 8001 8002
HEALTHCHECK --interval=10s --timeout=3s --start-period=600s \
  CMD bash -c 'exec 3<>/dev/tcp/127.0.0.1/8000 && printf "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" >&3 && head -1 <&3 | grep -q " 200 "'
ENTRYPOINT ["saggar", "serve", "--host", "0.0.0.0", "--cache-dir", "/var/cache/saggar"]
CMD ["--model-repository", "/models"]
