# promptcache in a container: build stage with the Debian -dev packages (and
# npm, to fetch the builtin embedder's word vectors with `make vectors`),
# runtime stage with only the shared libraries, the binary and the vectors.
FROM debian:12-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        gcc g++ libc6-dev make pkg-config libevent-dev libcurl4-openssl-dev libhiredis-dev \
        libcjson-dev libssl-dev libfaiss-dev libopenblas-dev npm ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile VERSION ./
COPY include include
COPY src src
COPY migrations migrations
COPY tools tools
RUN make -j"$(nproc)" all && make vectors

FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
        libevent-2.1-7 libevent-pthreads-2.1-7 libcurl4 libhiredis0.14 libcjson1 libssl3 \
        libopenblas0 libgomp1 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --no-create-home promptcache
COPY --from=build /src/build/promptcache /usr/local/bin/promptcache
# found by the default embedder-vectors: ../share/promptcache/ from the binary
COPY --from=build /src/build/wordvec.bin /usr/local/share/promptcache/wordvec.bin
COPY conf/promptcache.conf /etc/promptcache/promptcache.conf
USER promptcache
EXPOSE 8080
ENTRYPOINT ["promptcache", "/etc/promptcache/promptcache.conf", "--listen", "0.0.0.0:8080"]
