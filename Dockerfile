# promptcache in a container: build stage with the Debian -dev packages,
# runtime stage with only the shared libraries.
FROM debian:12-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        gcc g++ libc6-dev make pkg-config libevent-dev libcurl4-openssl-dev libhiredis-dev \
        libcjson-dev libssl-dev libfaiss-dev libopenblas-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile VERSION ./
COPY include include
COPY src src
COPY migrations migrations
COPY tools tools
RUN make -j"$(nproc)" all

FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
        libevent-2.1-7 libevent-pthreads-2.1-7 libcurl4 libhiredis0.14 libcjson1 libssl3 \
        libopenblas0 libgomp1 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --no-create-home promptcache
COPY --from=build /src/build/promptcache /usr/local/bin/promptcache
COPY conf/promptcache.conf /etc/promptcache/promptcache.conf
USER promptcache
EXPOSE 8080
ENTRYPOINT ["promptcache", "/etc/promptcache/promptcache.conf", "--listen", "0.0.0.0:8080"]
