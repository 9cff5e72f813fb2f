# promptcache in a container, on Debian 12: a build stage with the -dev
# packages, npm (for the builtin embedder's word vectors, `make vectors`, and
# the maintained price list, `make prices`) and the Makefile, and a runtime
# stage with the shared libraries, the binary, the word vectors, the
# configuration and both price lists, run as an unprivileged user.
#
#   docker build -t promptcache .
#   docker run --rm -p 127.0.0.1:8080:8080 promptcache \
#       /etc/promptcache/promptcache.conf --redis redis://REDIS-HOST:6379/0
#   docker run --rm promptcache -T /etc/promptcache/promptcache.conf   # effective config
#   docker run --rm promptcache report /etc/promptcache/promptcache.conf --redis ...
#
# Secrets come from the environment or files (PROMPTCACHE_UPSTREAM_KEY,
# PROMPTCACHE_ADMIN_TOKEN_FILE=/run/secrets/..., PROMPTCACHE_REDIS_PASSWORD),
# never from the command line.

FROM debian:12-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        gcc g++ libc6-dev make pkg-config libevent-dev libcurl4-openssl-dev libhiredis-dev \
        libcjson-dev libssl-dev libfaiss-dev libopenblas-dev npm ca-certificates wordnet-base \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile VERSION ./
COPY include include
COPY src src
COPY migrations migrations
COPY tools tools
RUN make -j"$(nproc)" all && make vectors && make prices && build/promptcache --version

FROM debian:12-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libevent-2.1-7 libevent-pthreads-2.1-7 libcurl4 libhiredis0.14 libcjson1 libssl3 \
        libopenblas0 libgomp1 libstdc++6 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 promptcache \
    && useradd --system --uid 10001 --gid promptcache --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin promptcache
COPY --from=build /src/build/promptcache /usr/local/bin/promptcache
# found by the default embedder-vectors: ../share/promptcache/ from the binary
COPY --from=build /src/build/wordvec.bin /usr/local/share/promptcache/wordvec.bin
COPY conf/container.conf /etc/promptcache/promptcache.conf
COPY conf/promptcache.conf /etc/promptcache/promptcache.conf.sample
# The default pricing: the maintained list (@pydantic/genai-prices, converted
# by make prices), found at ../share/promptcache/prices.json from the binary;
# the hand-copied conf/pricing.json is the fallback.
COPY --from=build /src/build/prices.json /usr/local/share/promptcache/prices.json
COPY conf/pricing.json /etc/promptcache/pricing.json
# Numeric, so that Kubernetes' runAsNonRoot can check it is not root.
USER 10001:10001
EXPOSE 8080
STOPSIGNAL SIGTERM
# The binary is its own probe: the image needs no curl.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["promptcache", "--healthcheck", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["promptcache"]
CMD ["/etc/promptcache/promptcache.conf"]
