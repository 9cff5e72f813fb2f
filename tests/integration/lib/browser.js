'use strict';
/*
 * browser.js - a page loaded in Debian's headless chromium, driven over the
 * DevTools protocol with a small WebSocket client of our own (Node 18/20
 * have none without a flag), so no browser or npm package is downloaded.
 *
 *   const b = await openBrowser();           // chromium --headless ... --remote-debugging-port=0
 *   const page = await b.page(url);          // a tab, navigated
 *   await page.waitFor('document.body.dataset.ready === "1"');
 *   const v = await page.evaluate('...');    // a JSON-able value
 *   await b.close();
 */
const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const {spawnTracked, tmpDir} = require('./procs');
const {waitFor, withDeadline} = require('./wait');

const CHROMIUM_FLAGS = ['--headless', '--no-sandbox', '--disable-gpu',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--no-first-run', '--disable-dev-shm-usage'];

function chromiumPath() {
    for (const p of ['/usr/bin/chromium', '/usr/bin/chromium-browser'])
        if (fs.existsSync(p))
            return p;
    return null;
}

function getJson(url) {
    return new Promise((resolve, reject) => {
        http.get(url, (res) => {
            let body = '';
            res.on('data', (c) => (body += c));
            res.on('end', () => {
                try {
                    resolve(JSON.parse(body));
                } catch (e) {
                    reject(e);
                }
            });
        }).on('error', reject);
    });
}

/* A WebSocket client, text frames only (RFC 6455: masked frames out, any length in). */
class Socket {
    static open(url) {
        const u = new URL(url);
        const key = crypto.randomBytes(16).toString('base64');
        return new Promise((resolve, reject) => {
            const req = http.request({host: u.hostname, port: u.port, path: u.pathname, headers: {
                Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13',
                'Sec-WebSocket-Key': key}});
            req.on('upgrade', (res, sock) => resolve(new Socket(sock)));
            req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
            req.on('error', reject);
            req.end();
        });
    }

    constructor(sock) {
        this.sock = sock;
        this.buf = Buffer.alloc(0);
        this.parts = [];
        this.onmessage = () => {};
        sock.on('data', (d) => this._data(d));
    }

    send(text) {
        const payload = Buffer.from(text);
        const mask = crypto.randomBytes(4);
        const n = payload.length;
        const head = n < 126 ? Buffer.from([0x81, 0x80 | n])
            : n < 65536 ? Buffer.from([0x81, 0x80 | 126, n >> 8, n & 255])
                : Buffer.concat([Buffer.from([0x81, 0x80 | 127]), (() => {
                    const b = Buffer.alloc(8);
                    b.writeBigUInt64BE(BigInt(n));
                    return b;
                })()]);
        const body = Buffer.from(payload.map((b, i) => b ^ mask[i % 4]));
        this.sock.write(Buffer.concat([head, mask, body]));
    }

    _data(d) {
        this.buf = Buffer.concat([this.buf, d]);
        for (;;) {
            if (this.buf.length < 2)
                return;
            const fin = (this.buf[0] & 0x80) !== 0, op = this.buf[0] & 0x0f;
            let n = this.buf[1] & 0x7f, off = 2;
            if (n === 126) {
                if (this.buf.length < 4)
                    return;
                n = this.buf.readUInt16BE(2);
                off = 4;
            } else if (n === 127) {
                if (this.buf.length < 10)
                    return;
                n = Number(this.buf.readBigUInt64BE(2));
                off = 10;
            }
            if (this.buf.length < off + n)
                return;
            const payload = this.buf.subarray(off, off + n);
            this.buf = this.buf.subarray(off + n);
            if (op === 0x8)
                return this.sock.end();
            if (op === 0x9 || op === 0xa)
                continue; /* ping / pong: chromium sends none to clients */
            this.parts.push(payload);
            if (fin) {
                const text = Buffer.concat(this.parts).toString('utf8');
                this.parts = [];
                this.onmessage(text);
            }
        }
    }

    close() {
        this.sock.destroy();
    }
}

class Page {
    constructor(sock) {
        this.sock = sock;
        this.seq = 0;
        this.waiting = new Map();
        sock.onmessage = (text) => {
            const m = JSON.parse(text);
            const w = this.waiting.get(m.id);
            if (!w)
                return;
            this.waiting.delete(m.id);
            if (m.error)
                w.reject(new Error(`${m.error.message} (${JSON.stringify(m.error)})`));
            else
                w.resolve(m.result);
        };
    }

    call(method, params = {}) {
        const id = ++this.seq;
        return withDeadline(new Promise((resolve, reject) => {
            this.waiting.set(id, {resolve, reject});
            this.sock.send(JSON.stringify({id, method, params}));
        }), 15000, `DevTools ${method}`);
    }

    /* The value of a JavaScript expression in the page (JSON-able). */
    async evaluate(expr) {
        const r = await this.call('Runtime.evaluate', {expression: expr, returnByValue: true});
        if (r.exceptionDetails)
            throw new Error(`page: ${r.exceptionDetails.text} ${JSON.stringify(r.exceptionDetails.exception || {})}`);
        return r.result.value;
    }

    waitFor(expr, {timeout = 20000, what = expr} = {}) {
        return waitFor(async () => (await this.evaluate(expr)) === true, {timeout, what});
    }
}

async function openBrowser() {
    const bin = chromiumPath();
    if (!bin)
        throw new Error('chromium is not installed (make deps-test installs Debian\'s chromium)');
    const dir = tmpDir('pc-chromium-');
    const proc = spawnTracked('chromium', bin, [...CHROMIUM_FLAGS, `--user-data-dir=${dir}`,
        '--remote-debugging-port=0', 'about:blank'], {cwd: dir});
    const wsUrl = await waitFor(() => {
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(proc.output);
        return m ? m[1] : null;
    }, {timeout: 30000, what: 'chromium to print its DevTools address'});
    const base = `http://${new URL(wsUrl).host}`;
    const sockets = [];
    return {
        async page(url) {
            const targets = await getJson(`${base}/json/list`);
            const t = targets.find((x) => x.type === 'page');
            const sock = await Socket.open(t.webSocketDebuggerUrl);
            sockets.push(sock);
            const page = new Page(sock);
            await page.call('Runtime.enable');
            await page.call('Page.navigate', {url});
            return page;
        },
        async close() {
            sockets.forEach((s) => s.close());
            await proc.terminate(5000);
        },
    };
}

module.exports = {openBrowser, chromiumPath};
