/*
 * probe.c - the health-check client (see pc_probe.h). Owns one libcurl easy
 * handle for the length of one request; the answer's body is discarded.
 */
#include "pc_probe.h"

#include <stdio.h>

#include <curl/curl.h>

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

int probe_cli(const char *url)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "promptcache: healthcheck: cannot initialise libcurl\n");
        return 1;
    }
    CURL *h = curl_easy_init();
    long status = 0;
    CURLcode rc = CURLE_FAILED_INIT;
    if (h != NULL) {
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_NOPROXY, "*"); /* the proxy itself, never via another */
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)PROBE_TIMEOUT_MS);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
        rc = curl_easy_perform(h);
        if (rc == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
    }
    curl_global_cleanup();
    if (rc != CURLE_OK) {
        fprintf(stderr, "promptcache: healthcheck %s: %s\n", url, curl_easy_strerror(rc));
        return 1;
    }
    if (status < 200 || status > 299) {
        fprintf(stderr, "promptcache: healthcheck %s: status %ld\n", url, status);
        return 1;
    }
    return 0;
}
