'use strict';
/*
 * A replica whose name the DNS never answers for. The proxy runs in a mount
 * namespace of its own (unshare -m) whose /etc/resolv.conf names a
 * nameserver that reads queries and never replies: getaddrinfo, in libcurl's
 * resolver thread, waits out its whole timeout. The call must end at
 * upstream-connect-timeout with a 504 in the API's shape, and the worker
 * must go on serving everyone else meanwhile.
 */
const assert = require('node:assert/strict');
const dgram = require('node:dgram');
const fs = require('node:fs');
const path = require('node:path');
const {execFileSync} = require('node:child_process');
const h = require('./lib');

const env = h.environment({proxy: false});

const CHAT = '/v1/chat/completions';
const NS = '127.83.0.1'; /* a loopback address of its own: port 53 there is free */
const RESOLVER_TIMEOUT_S = 30; /* longer than any test here waits */

function canUnshare() {
    try {
        execFileSync('unshare', ['-m', 'true'], {stdio: 'ignore'});
        return true;
    } catch (e) {
        return false;
    }
}

/* A nameserver that counts the queries it reads and never answers one. */
function silentNameserver() {
    const ns = {queries: 0, sock: dgram.createSocket('udp4')};
    ns.sock.on('message', () => ns.queries++);
    return new Promise((resolve, reject) => {
        ns.sock.once('error', reject);
        ns.sock.bind(53, NS, () => resolve(ns));
    });
}

/* The wrap that runs the proxy with resolv.conf pointing at ns. */
function silentDnsWrap() {
    const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'pc-dns-'));
    const conf = path.join(dir, 'resolv.conf');
    fs.writeFileSync(conf, `nameserver ${NS}\noptions timeout:${RESOLVER_TIMEOUT_S} attempts:1\n`);
    return ['unshare', '-m', 'sh', '-c', `mount --bind ${conf} /etc/resolv.conf && exec "$@"`, 'sh'];
}

const skip = canUnshare() ? false : 'needs unshare -m (root, mount namespaces)';

h.test('a replica whose name never resolves: 504 at upstream-connect-timeout, the worker serves meanwhile',
    {skip}, async () => {
        const ns = await silentNameserver();
        try {
            const proxy = await env.startProxy({
                upstream: 'http://replica.never-resolves.test:8000', workers: 1, wrap: silentDnsWrap(),
                args: ['--upstream-connect-timeout', '1', '--upstream-timeout', '60'],
            });
            const first = proxy.post(CHAT, h.chatBody(h.uniq('no dns')), {'x-cache-mode': 'off'});
            await h.waitFor(() => ns.queries > 0, {what: 'the proxy to ask the nameserver'});
            const r = await first;
            h.assertOpenAIError(r, 504);
            /* The worker that ended the call is free: it answers at once, well before the
               resolver's own timeout would let a blocked thread go. */
            const health = await proxy.get('/healthz');
            assert.equal(health.status, 200);
            const again = await proxy.post(CHAT, h.chatBody(h.uniq('no dns again')), {'x-cache-mode': 'off'});
            h.assertOpenAIError(again, 504);
            /* Stopped while a name is being resolved: the thread left waiting is no reason to
               wait, nor to fail (ASan: no leak, no use after free at the exit). */
            const queries = ns.queries;
            const pending = proxy.post(CHAT, h.chatBody(h.uniq('no dns at the stop')), {'x-cache-mode': 'off'});
            await h.waitFor(() => ns.queries > queries, {what: 'the proxy to ask the nameserver again'});
            const exited = proxy.stop(15000);
            const last = await pending;
            assert.ok(last.status === 503 || last.status === 504, `${last.status} ${last.text}`);
            assert.equal(await exited, 0, 'exit code');
        } finally {
            ns.sock.close();
        }
    });
