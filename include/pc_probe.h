/*
 * pc_probe.h - `promptcache --healthcheck [URL]`: one HTTP GET, for container
 * health checks, so the image needs no curl or wget. Exit status 0 when the
 * URL answers 2xx within PROBE_TIMEOUT_MS, 1 otherwise (with the reason on
 * stderr).
 */
#ifndef PC_PROBE_H
#define PC_PROBE_H

#define PROBE_DEFAULT_URL "http://127.0.0.1:8080/healthz"
#define PROBE_TIMEOUT_MS  5000

/* Runs the probe; returns the process exit status. curl_global_init is done inside. */
int probe_cli(const char *url);

#endif
