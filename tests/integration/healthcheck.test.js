'use strict';
/*
 * `promptcache --healthcheck [URL]`, the container health check: exit 0 when
 * the URL answers 2xx, 1 (with the reason on stderr) when it answers
 * otherwise or not at all.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();

h.test('a serving proxy is healthy', async () => {
    const r = await h.runCli(['--healthcheck', `${env.proxy.url}/healthz`]);
    assert.equal(r.code, 0, r.output);
});

h.test('a non-2xx answer or no answer is unhealthy', async () => {
    const notFound = await h.runCli(['--healthcheck', `${env.proxy.url}/no-such-endpoint-of-the-proxy`]);
    assert.equal(notFound.code, 1, notFound.output);
    const port = await h.freePort();
    const refused = await h.runCli(['--healthcheck', `http://127.0.0.1:${port}/healthz`]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /healthcheck http:\/\/127\.0\.0\.1:\d+\/healthz: /);
});
