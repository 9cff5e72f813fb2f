'use strict';
/*
 * The official Python SDKs (openai, anthropic) are not installable here (no
 * PyPI), so their wire behaviour is replayed byte for byte over a raw
 * keep-alive socket, as httpx sends it: Stainless headers, Accept-Encoding
 * "gzip, deflate, br, zstd", json.dumps spacing, several requests on one
 * HTTP/1.1 connection, and retries that differ only in x-stainless-retry-count.
 * What must hold: retries hit the cache, the SDK's bookkeeping headers never
 * split or poison entries, answers come back uncompressed unless the upstream
 * itself compressed them, and a compressed upstream answer is relayed intact
 * (and not cached, since it could not be served to a client without gzip).
 * The Responses API helper (stream=True) and create share one entry.
 */
const assert = require('node:assert/strict');
const net = require('node:net');
const zlib = require('node:zlib');
const h = require('./lib');

const env = h.environment();

/* Headers openai-python 1.x sends (values as httpx writes them). */
function openaiHeaders(retry, extra = {}) {
    return {
        'Host': `127.0.0.1:${env.proxy.port}`,
        'Accept-Encoding': 'gzip, deflate, br, zstd',
        'Connection': 'keep-alive',
        'Accept': 'application/json',
        'Content-Type': 'application/json',
        'User-Agent': 'OpenAI/Python 1.99.1',
        'X-Stainless-Lang': 'python',
        'X-Stainless-Package-Version': '1.99.1',
        'X-Stainless-OS': 'Linux',
        'X-Stainless-Arch': 'x64',
        'X-Stainless-Runtime': 'CPython',
        'X-Stainless-Runtime-Version': '3.11.7',
        'Authorization': 'Bearer sk-python-wire',
        'X-Stainless-Async': 'false',
        'x-stainless-retry-count': String(retry),
        'x-stainless-read-timeout': '600',
        ...extra,
    };
}

function anthropicHeaders(retry, extra = {}) {
    const hd = openaiHeaders(retry, extra);
    delete hd.Authorization;
    hd['User-Agent'] = 'Anthropic/Python 0.64.0';
    hd['X-Stainless-Package-Version'] = '0.64.0';
    hd['x-api-key'] = 'sk-ant-python-wire';
    hd['anthropic-version'] = '2023-06-01';
    return hd;
}

/* Python's json.dumps default: ", " and ": " separators. */
function pyDumps(v) {
    if (Array.isArray(v))
        return `[${v.map(pyDumps).join(', ')}]`;
    if (v && typeof v === 'object')
        return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pyDumps(x)}`).join(', ')}}`;
    return JSON.stringify(v);
}

/* One keep-alive connection that sends requests one after another and parses the answers. */
class Conn {
    constructor(port) {
        this.sock = net.connect(port, '127.0.0.1');
        this.buf = Buffer.alloc(0);
        this.waiters = [];
        this.sock.on('data', (d) => {
            this.buf = Buffer.concat([this.buf, d]);
            this._pump();
        });
        this.closed = new Promise((resolve) => this.sock.on('close', resolve));
    }

    request(path, headers, body) {
        const data = Buffer.from(body);
        const lines = [`POST ${path} HTTP/1.1`];
        for (const [k, v] of Object.entries({...headers, 'Content-Length': String(data.length)}))
            lines.push(`${k}: ${v}`);
        this.sock.write(Buffer.concat([Buffer.from(lines.join('\r\n') + '\r\n\r\n'), data]));
        return new Promise((resolve) => {
            this.waiters.push(resolve);
            this._pump();
        });
    }

    _pump() {
        while (this.waiters.length) {
            const end = this.buf.indexOf('\r\n\r\n');
            if (end < 0)
                return;
            const head = this.buf.subarray(0, end).toString('latin1').split('\r\n');
            const status = Number(head[0].split(' ')[1]);
            const headers = {};
            for (const l of head.slice(1)) {
                const i = l.indexOf(':');
                headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
            }
            let body;
            let rest;
            if (headers['content-length'] !== undefined) {
                const n = Number(headers['content-length']);
                if (this.buf.length < end + 4 + n)
                    return;
                body = this.buf.subarray(end + 4, end + 4 + n);
                rest = this.buf.subarray(end + 4 + n);
            } else if (/chunked/i.test(headers['transfer-encoding'] || '')) {
                const parsed = dechunk(this.buf.subarray(end + 4));
                if (!parsed)
                    return;
                [body, rest] = parsed;
            } else {
                return;
            }
            this.buf = rest;
            this.waiters.shift()({status, headers, body});
        }
    }

    close() {
        this.sock.end();
        return this.closed;
    }
}

function dechunk(buf) {
    const parts = [];
    let i = 0;
    for (;;) {
        const eol = buf.indexOf('\r\n', i);
        if (eol < 0)
            return null;
        const n = parseInt(buf.subarray(i, eol).toString('latin1'), 16);
        if (buf.length < eol + 2 + n + 2)
            return null;
        if (n === 0)
            return [Buffer.concat(parts), buf.subarray(eol + 4)];
        parts.push(buf.subarray(eol + 2, eol + 2 + n));
        i = eol + 2 + n + 2;
    }
}

const CHAT = '/v1/chat/completions';

h.test('openai-python: a retry on the same connection hits the cache; SDK headers do not split entries', async () => {
    const c = new Conn(env.proxy.port);
    const body = pyDumps({messages: [{role: 'user', content: h.uniq('python wire')}], model: 'gpt-4o-mini',
        temperature: 0.2});
    const calls = env.mock.callCount(CHAT);
    const first = await c.request(CHAT, openaiHeaders(0), body);
    assert.equal(first.status, 200, first.body.toString());
    assert.equal(first.headers['x-cache-status'], 'MISS');
    assert.equal(first.headers['content-encoding'], undefined, 'identity, whatever Accept-Encoding said');
    const answer = JSON.parse(first.body);
    /* The SDK retries (say after a read timeout on its side) with retry-count 1. */
    const retry = await c.request(CHAT, openaiHeaders(1), body);
    assert.equal(retry.headers['x-cache-status'], 'HIT');
    assert.deepEqual(JSON.parse(retry.body), answer);
    /* httpx >= 0.28 writes compact JSON: the same request, the same entry. */
    const compact = await c.request(CHAT, openaiHeaders(0, {'X-Stainless-Async': 'async:asyncio'}),
        JSON.stringify(JSON.parse(body)));
    assert.equal(compact.headers['x-cache-status'], 'HIT');
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'one upstream call for the three');
    /* The upstream saw no Accept-Encoding (it would compress what the cache stores). */
    const seen = env.mock.requests[env.mock.requests.length - 1].headers;
    assert.equal(seen['accept-encoding'], undefined);
    assert.equal(seen['x-stainless-lang'], 'python', 'the SDK headers still reach the upstream');
    await c.close();
});

h.test('openai-python: after a 500 the retry is a fresh call, and the one after hits', async () => {
    const c = new Conn(env.proxy.port);
    const body = pyDumps({model: 'gpt-4o-mini', messages: [{role: 'user', content: h.uniq('flaky')}]});
    const bad = await c.request(CHAT, openaiHeaders(0, {'x-mock-status': '500'}), body);
    assert.equal(bad.status, 500);
    const ok = await c.request(CHAT, openaiHeaders(1), body);
    assert.equal(ok.status, 200);
    assert.equal(ok.headers['x-cache-status'], 'MISS', 'the error was not cached');
    const again = await c.request(CHAT, openaiHeaders(0), body);
    assert.equal(again.headers['x-cache-status'], 'HIT');
    await c.close();
});

h.test('anthropic-python: streamed messages on a keep-alive connection, retry hits', async () => {
    const c = new Conn(env.proxy.port);
    const body = pyDumps({max_tokens: 1024, messages: [{role: 'user', content: h.uniq('claude py')}],
        model: 'claude-sonnet-4-5', stream: true});
    const hd = {...anthropicHeaders(0), Accept: 'text/event-stream'};
    const first = await c.request('/v1/messages', hd, body);
    assert.equal(first.status, 200);
    assert.match(first.headers['content-type'], /text\/event-stream/);
    const events = h.parseSSE(first.body.toString('utf8'));
    const msg = h.assembleMessage(events);
    const retry = await c.request('/v1/messages', {...hd, 'x-stainless-retry-count': '1'}, body);
    assert.equal(retry.headers['x-cache-status'], 'HIT');
    assert.deepEqual(h.assembleMessage(h.parseSSE(retry.body.toString('utf8'))), msg);
    await c.close();
});

h.test('a gzip answer from the upstream is relayed intact and not cached', async () => {
    const c = new Conn(env.proxy.port);
    const body = pyDumps({model: 'gpt-4o-mini', messages: [{role: 'user', content: h.uniq('gzip')}]});
    const r = await c.request(CHAT, openaiHeaders(0, {'x-mock-gzip': '1'}), body);
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-encoding'], 'gzip');
    const json = JSON.parse(zlib.gunzipSync(r.body).toString('utf8'));
    assert.equal(json.object, 'chat.completion');
    const again = await c.request(CHAT, openaiHeaders(1), body);
    assert.equal(again.headers['x-cache-status'], 'MISS', 'an encoded body is never stored');
    assert.equal(again.headers['content-encoding'], undefined);
    JSON.parse(again.body);
    await c.close();
});

h.test('openai-python: the Responses API stream helper, then create and a retry, share one entry', async () => {
    const c = new Conn(env.proxy.port);
    const RESP = '/v1/responses';
    const input = [{role: 'user', content: [{type: 'input_text', text: h.uniq('py responses')}]}];
    const calls = env.mock.callCount(RESP);
    /* client.responses.stream(...): stream=True and the helper's header. */
    const streamed = await c.request(RESP, {...openaiHeaders(0, {'X-Stainless-Helper-Method': 'stream'}),
        Accept: 'text/event-stream'}, pyDumps({input, model: 'gpt-4.1-mini', stream: true}));
    assert.equal(streamed.status, 200);
    assert.equal(streamed.headers['x-cache-status'], 'MISS');
    const events = h.parseSSE(streamed.body.toString('utf8'));
    const final = JSON.parse(events.find((e) => e.event === 'response.completed').data).response;
    /* client.responses.create(...) with the same input, and its retry. */
    const created = await c.request(RESP, openaiHeaders(0), pyDumps({input, model: 'gpt-4.1-mini'}));
    assert.equal(created.headers['x-cache-status'], 'HIT');
    assert.deepEqual(JSON.parse(created.body), final);
    assert.equal(created.headers['x-request-id'], streamed.headers['x-request-id']);
    const retry = await c.request(RESP, openaiHeaders(1), pyDumps({input, model: 'gpt-4.1-mini'}));
    assert.equal(retry.headers['x-cache-status'], 'HIT');
    assert.equal(env.mock.callCount(RESP), calls + 1);
    await c.close();
});
