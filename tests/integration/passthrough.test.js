'use strict';
/*
 * What the upstream receives: other paths are passed through untouched,
 * client credentials are forwarded (or replaced by --upstream-key), and
 * hop-by-hop headers stay on the client's connection.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';

h.test('GET /v1/models is passed through', async () => {
    const calls = env.mock.callCount('/v1/models');
    const r = await env.proxy.request({method: 'GET', path: '/v1/models?limit=3', headers: h.bearer('sk-models')});
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.object, 'list');
    assert.ok(r.json.data.some((m) => m.id === 'gpt-4o-mini'));
    assert.equal(env.mock.callCount('/v1/models'), calls + 1);
    const got = env.mock.lastRequest('/v1/models');
    assert.equal(got.url, '/v1/models?limit=3', 'the query string is kept');
    assert.equal(got.headers.authorization, 'Bearer sk-models');
});

h.test('unknown paths are passed through with their status and body', async () => {
    const body = {anything: [1, 2, {three: 'four'}]};
    const r = await env.proxy.request({method: 'POST', path: '/v1/responses/unknown', body,
        headers: h.bearer('sk-unknown')});
    assert.equal(r.status, 404);
    assert.match(r.json.error.message, /Unknown request URL: POST \/v1\/responses\/unknown/);
    const got = env.mock.lastRequest('/v1/responses/unknown');
    assert.equal(got.rawBody, JSON.stringify(body), 'the body is forwarded byte for byte');
});

h.test('client credentials are forwarded to the upstream', async () => {
    await env.proxy.post(CHAT, h.chatBody(h.uniq('fwd bearer')), h.bearer('sk-forward-me'));
    assert.equal(env.mock.lastRequest(CHAT).headers.authorization, 'Bearer sk-forward-me');

    await env.proxy.post(MESSAGES, h.messagesBody(h.uniq('fwd key')), {
        'x-api-key': 'sk-ant-forward-me', 'anthropic-version': '2023-06-01', 'anthropic-beta': 'tools-2024-04-04',
    });
    const got = env.mock.lastRequest(MESSAGES).headers;
    assert.equal(got['x-api-key'], 'sk-ant-forward-me');
    assert.equal(got['anthropic-version'], '2023-06-01');
    assert.equal(got['anthropic-beta'], 'tools-2024-04-04');
});

h.test('other end-to-end headers are forwarded', async () => {
    await env.proxy.post(CHAT, h.chatBody(h.uniq('e2e headers')), {
        'openai-organization': 'org-test', 'x-custom-trace': 'trace-123', 'user-agent': 'itest/1.0',
    });
    const got = env.mock.lastRequest(CHAT).headers;
    assert.equal(got['openai-organization'], 'org-test');
    assert.equal(got['x-custom-trace'], 'trace-123');
});

h.test('hop-by-hop headers are not forwarded', async () => {
    await env.proxy.post(CHAT, h.chatBody(h.uniq('hop by hop')), {
        'connection': 'keep-alive, x-hop-marker',
        'keep-alive': 'timeout=17, max=99',
        'te': 'trailers',
        'upgrade': 'h2c-test',
        'proxy-authorization': 'Basic cHJveHk6c2VjcmV0',
    });
    const got = env.mock.lastRequest(CHAT).headers;
    for (const name of ['keep-alive', 'te', 'upgrade', 'proxy-authorization'])
        assert.equal(got[name], undefined, `${name} was forwarded: ${got[name]}`);
    assert.ok(!String(got.connection || '').includes('x-hop-marker'),
        `the client's Connection header was forwarded: ${got.connection}`);
});

h.test('framing, hop-by-hop and credential headers spelled with underscores are not forwarded', async () => {
    /*
     * CGI and WSGI gateways read "Transfer_Encoding" as Transfer-Encoding: sent on beside the
     * proxy's own Content-Length it could split the body differently upstream, on a connection
     * other clients share; "X_Api_Key" would be a credential there the tenant never saw.
     */
    const body = JSON.stringify(h.chatBody(h.uniq('underscores')));
    const c = await h.RawConnection.open(env.proxy.port);
    const r = await c.roundtrip(`POST ${CHAT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-under\r\n` +
        'Content-Type: application/json\r\nTransfer_Encoding: chunked\r\nContent_Length: 3\r\n' +
        'Keep_Alive: 1\r\nX_Api_Key: sk-someone-else\r\nX_Trace_Id: t-42\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    c.close();
    assert.equal(r.status, 200, r.body);
    const got = env.mock.lastRequest(CHAT).headers;
    for (const name of ['transfer_encoding', 'content_length', 'keep_alive', 'x_api_key'])
        assert.equal(got[name], undefined, `${name} was forwarded: ${got[name]}`);
    assert.equal(got.x_trace_id, 't-42', 'other names with underscores go on');
    assert.equal(got.authorization, 'Bearer sk-under');
});

h.test('the response carries the upstream\'s own headers', async () => {
    const r = await env.proxy.post(CHAT, h.chatBody(h.uniq('resp headers')));
    assert.match(String(r.headers['x-request-id']), /^req_mock\d+$/);
});

h.test('--upstream-key replaces the client\'s credentials', async () => {
    const proxy = await env.startProxy({args: ['--upstream-key', 'sk-upstream-secret']});
    await proxy.post(CHAT, h.chatBody(h.uniq('upstream key')), h.bearer('sk-client-secret'));
    const chat = env.mock.lastRequest(CHAT).headers;
    assert.equal(chat.authorization, 'Bearer sk-upstream-secret');
    assert.ok(!JSON.stringify(chat).includes('sk-client-secret'), 'the client credential is not forwarded');

    await proxy.post(MESSAGES, h.messagesBody(h.uniq('upstream key')), h.apiKey('sk-ant-client-secret'));
    const msg = env.mock.lastRequest(MESSAGES).headers;
    assert.ok(!JSON.stringify(msg).includes('sk-ant-client-secret'), 'the client credential is not forwarded');
    assert.ok(msg['x-api-key'] === 'sk-upstream-secret' || msg.authorization === 'Bearer sk-upstream-secret',
        `the upstream key is sent instead: ${JSON.stringify(msg)}`);
    assert.equal(await proxy.stop(), 0);
});

h.test('with --upstream-key, tenants are still told apart by their own credentials', async () => {
    const proxy = await env.startProxy({args: ['--upstream-key', 'sk-upstream-secret']});
    const body = h.chatBody(h.uniq('upstream key tenants'));
    await proxy.post(CHAT, body, h.bearer('sk-tenant-one'));
    h.assertHit(await proxy.post(CHAT, body, h.bearer('sk-tenant-one')));
    h.assertFromUpstream(await proxy.post(CHAT, body, h.bearer('sk-tenant-two')), env.mock);
    assert.equal(await proxy.stop(), 0);
});

/*
 * Send `raw` on one connection and collect what comes back until `count`
 * response heads have arrived; resolves to {lines (status lines), raw}.
 */
function rawExchange(port, raw, count) {
    const net = require('node:net');
    return new Promise((resolve, reject) => {
        const sock = net.connect({port, host: '127.0.0.1'}, () => sock.write(raw));
        let buf = '';
        const timer = setTimeout(() => done(new Error(`timed out; got: ${JSON.stringify(buf)}`)), 5000);
        const done = (err) => {
            clearTimeout(timer);
            sock.destroy();
            if (err)
                return reject(err);
            resolve({lines: buf.match(/^HTTP\/1\.1 .*$/gm) || [], raw: buf});
        };
        sock.on('data', (d) => {
            buf += d.toString('latin1');
            const heads = buf.split('\r\n\r\n').length - 1;
            if (heads >= count)
                setTimeout(() => done(), 50); /* let any stray framing bytes arrive */
        });
        sock.on('error', done);
    });
}

h.test('a relayed 204 or 304 has no body framing, so keep-alive stays in step', async () => {
    for (const status of ['204', '304']) {
        const req = (extra) => `GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-nobody\r\n${extra}\r\n`;
        const {raw} = await rawExchange(env.proxy.port,
            req(`x-mock-status: ${status}\r\n`) + req(''), 2);
        /* The second status line must follow the first head directly: no stray chunk framing. */
        assert.match(raw, new RegExp(`^HTTP/1\\.1 ${status} [^]*?\r\n\r\nHTTP/1\\.1 200 `),
            JSON.stringify(raw.slice(0, 400)));
        assert.doesNotMatch(raw.split('\r\n\r\n')[0], /transfer-encoding/i);
    }
});

h.test('request targets that are not origin-form are refused, never forwarded', async () => {
    const calls = env.mock.callCount();
    for (const target of ['@127.0.0.1:1/x', '.evil.example/x', 'ftp://127.0.0.1:1/x', '*']) {
        const {lines} = await rawExchange(env.proxy.port,
            `GET ${target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-target\r\n\r\n`, 1);
        assert.match(lines[0] || '', /^HTTP\/1\.1 400 /, `target ${target}`);
    }
    assert.equal(env.mock.callCount(), calls, 'nothing reached the upstream');
});

h.test('a WebSocket upgrade is refused with 501, not left hanging', async () => {
    const calls = env.mock.callCount();
    const r = await env.proxy.request({method: 'GET', path: '/v1/realtime',
        headers: {...h.bearer('sk-ws'), connection: 'Upgrade', upgrade: 'websocket',
            'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ=='}});
    assert.equal(r.status, 501);
    assert.match(r.json.error.message, /WebSocket/);
    assert.equal(env.mock.callCount(), calls);
});

h.test('an absolute-form target is taken as its path: the call goes to the upstream, never to the named host', async () => {
    /* RFC 9112 section 3.2.2: a server must accept it (a client told to use the proxy as an
     * HTTP proxy sends it); it was a 400. */
    const calls = env.mock.callCount('/v1/models');
    const {lines} = await rawExchange(env.proxy.port, 'GET http://api.example.invalid/v1/models?limit=2 ' +
        'HTTP/1.1\r\nHost: api.example.invalid\r\nAuthorization: Bearer sk-absolute\r\n\r\n', 1);
    assert.match(lines[0] || '', /^HTTP\/1\.1 200 /);
    assert.equal(env.mock.callCount('/v1/models'), calls + 1, 'the configured upstream answered');
    assert.match(env.mock.lastRequest('/v1/models').url, /^\/v1\/models\?limit=2$/);
    /* Not an absolute form of http or https: still refused. */
    for (const target of ['ftp://x/v1/models', 'http://x', 'http://x?/v1/models', '@x/v1/models']) {
        const {lines} = await rawExchange(env.proxy.port, `GET ${target} HTTP/1.1\r\nHost: x\r\n\r\n`, 1);
        assert.match(lines[0] || '', /^HTTP\/1\.1 400 /, target);
    }
});

h.test('OPTIONS * is answered by the proxy itself, never forwarded; the connection serves on', async () => {
    /* A load balancer's ping (RFC 9110 section 9.3.7): it was a 400, which marked the proxy down. */
    const calls = env.mock.callCount();
    const c = await h.RawConnection.open(env.proxy.port);
    const r = await c.roundtrip('OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-length'], '0');
    assert.equal(r.headers.connection, 'keep-alive');
    const next = await c.roundtrip('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.equal(next.status, 200);
    c.close();
    assert.equal(env.mock.callCount(), calls, 'nothing reached the upstream');
    /* Any other method with the asterisk is still refused. */
    const {lines} = await rawExchange(env.proxy.port, 'GET * HTTP/1.1\r\nHost: x\r\n\r\n', 1);
    assert.match(lines[0] || '', /^HTTP\/1\.1 400 /);
});
