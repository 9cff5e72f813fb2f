'use strict';
/*
 * tenant-names FILE: tenants (hashes of their credentials) get names, by
 * tenant id or by the SHA-256 of the key, reloaded on SIGHUP. The names
 * show in /stats (the tenants seen, with the key's last 4 characters), in
 * the tenant label of /metrics (the named ones, then other), in the
 * dashboard's table of tenants and in `promptcache report`, also for a
 * tenant named by key hash, which a proxy learns when the key is used.
 */
const assert = require('node:assert/strict');
const {execFileSync} = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./lib');

const KEY_A = 'sk-tenant-names-aaaaaaaaaaaa-wxyz';
const KEY_B = 'sk-tenant-names-bbbbbbbbbbbb-b0b0';
const KEY_C = 'sk-tenant-names-cccccccccccc-c0c0';
const dir = h.tmpDir('pc-tenants-');
const FILE = path.join(dir, 'tenants');
const sha256 = (s) => crypto.createHash('sha256').update(s).digest('hex');

fs.writeFileSync(FILE, `# names by key hash\nsha256:${sha256(KEY_B)}  billing service\n`);
const env = h.environment({proxyArgs: ['--tenant-names', FILE, '--workers', '2']});
const CHAT = '/v1/chat/completions';

let idA = null;

async function twice(key, label) {
    const body = h.chatBody(h.uniq(label));
    const miss = await env.proxy.post(CHAT, body, h.bearer(key));
    assert.equal(miss.status, 200, miss.text);
    h.assertHit(await env.proxy.post(CHAT, body, h.bearer(key)));
    return miss.headers['x-cache-key'].slice(0, 16);
}

/*
 * /stats once a tenant's requests are all counted: a worker counts a request
 * after its answer went out, so a read right after the answer can miss it.
 */
async function statsWhen(tenant, total) {
    let s = null;
    await h.waitFor(async () => {
        s = await env.proxy.stats();
        const r = s.tenant_requests && s.tenant_requests[tenant];
        return r !== undefined && r.hit + r.miss + r.bypass + r.refresh >= total;
    }, {what: `${total} requests of ${tenant} counted`});
    return s;
}

function metric(text, name, labels) {
    const re = new RegExp(`^promptcache_${name}_total\\{${labels}\\} (\\S+)$`, 'm');
    const m = re.exec(text);
    return m ? Number(m[1]) : 0;
}

async function reload(proxy) {
    const mark = proxy.proc.output.length;
    proxy.proc.signalIt('SIGHUP');
    await h.waitFor(() => /reload: every worker runs the new configuration/.test(proxy.proc.output.slice(mark)),
        {what: 'the reload applied'});
    return proxy.proc.output.slice(mark);
}

h.test('a tenant named by its key\'s hash is named once the key is used', async () => {
    const idB = await twice(KEY_B, 'names b');
    idA = await twice(KEY_A, 'names a');
    await twice(KEY_C, 'names c');
    await statsWhen('billing service', 2);
    const s = await statsWhen('other', 4);
    const byId = Object.fromEntries(s.tenants.map((t) => [t.id, t]));
    assert.deepEqual(byId[idB], {id: idB, key: '…b0b0', name: 'billing service'});
    assert.deepEqual(byId[idA], {id: idA, key: '…wxyz', name: null});
    assert.deepEqual(s.tenant_requests['billing service'], {hit: 1, miss: 1, bypass: 0, refresh: 0});
    assert.equal(s.tenant_requests.other.hit, 2, 'A and C are other');
    const m = (await env.proxy.get('/metrics')).text;
    assert.equal(metric(m, 'tenant_requests', 'cache="hit",tenant="billing service"'), 1);
    assert.equal(metric(m, 'tenant_requests', 'cache="miss",tenant="other"'), 2);
    assert.ok(metric(m, 'tenant_saved_cost', 'tenant="billing service"') > 0, 'money by tenant');
    assert.ok(metric(m, 'tenant_upstream_cost', 'tenant="other"') > 0);
    /* the learned id, in Redis: a fingerprint, never the key */
    const fps = await env.redis.command('HGETALL', 'pc:2:tk');
    assert.deepEqual(fps, [idB, sha256(KEY_B).slice(0, 16)]);
    const dump = String(await env.redis.command('KEYS', '*'));
    assert.ok(!dump.includes(KEY_B));
});

h.test('SIGHUP reloads the file: a tenant id gets its name', async () => {
    fs.writeFileSync(FILE, `sha256:${sha256(KEY_B)} billing service\n…wxyz:${idA}  search team\n`);
    const out = await reload(env.proxy);
    assert.match(out, /reload: applied tenant names \(.*tenants, 2\)/);
    await twice(KEY_A, 'names a again');
    const s = await statsWhen('search team', 2);
    assert.equal(s.tenants.find((t) => t.id === idA).name, 'search team');
    assert.deepEqual(s.tenant_requests['search team'], {hit: 1, miss: 1, bypass: 0, refresh: 0});
    const m = (await env.proxy.get('/metrics')).text;
    assert.equal(metric(m, 'tenant_requests', 'cache="hit",tenant="search team"'), 1);
    assert.equal(metric(m, 'tenant_requests', 'cache="hit",tenant="other"'), 2, 'the old series stays');
});

h.test('the dashboard\'s table of tenants and the report show the names', async () => {
    let data = null;
    await h.waitFor(async () => {
        data = (await env.proxy.get('/dashboard/data?hours=1')).json;
        const names = (data.tenants || []).map((t) => t.name);
        return names.includes('search team') && names.includes('billing service');
    }, {what: 'the tenants named in /dashboard/data', timeout: 15000});
    const b = data.tenants.find((t) => t.name === 'billing service');
    assert.equal(b.requests, 2);
    assert.equal(b.hit_rate, 0.5);
    assert.ok(b.money_saved > 0 && b.upstream_cost > 0);
    assert.ok(data.tenants.some((t) => t.name === null), 'an unnamed tenant by id');
    const page = (await env.proxy.get('/dashboard')).text;
    assert.match(page, /<table id="tenants">/);

    const json = await h.runCli(['report', '--redis', env.redis.url, '--tenant-names', FILE,
        '--format', 'json']);
    assert.equal(json.code, 0, json.output);
    const rep = JSON.parse(json.stdout);
    const named = Object.fromEntries(rep.tenants.map((t) => [t.name, t]));
    assert.equal(named['billing service'].requests, 2, 'named by key hash: learned from Redis');
    assert.equal(named['search team'].tenant, idA);
    const table = await h.runCli(['report', '--redis', env.redis.url, '--tenant-names', FILE]);
    assert.match(table.stdout, new RegExp(`^  search team \\(${idA}\\) `, 'm'));
    const csv = await h.runCli(['report', '--redis', env.redis.url, '--tenant-names', FILE,
        '--format', 'csv']);
    assert.match(csv.stdout, /^scope,name,.*,tenant_name$/m);
    assert.match(csv.stdout, new RegExp(`^tenant,${idA},.*,search team$`, 'm'));
});

h.test('a bad file is refused with FILE:LINE, at start and on reload', async () => {
    const bad = path.join(dir, 'bad');
    fs.writeFileSync(bad, '0123456789abcdef ok\n0123456789ABCDEF upper\nsha256:abc short\n');
    const r = await h.runCli(['-t', '--tenant-names', bad]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, new RegExp(`tenant-names: ${bad}:2: the identifier is a tenant id`));
    fs.writeFileSync(FILE, `${idA} other\n`);
    const mark = env.proxy.proc.output.length;
    env.proxy.proc.signalIt('SIGHUP');
    await h.waitFor(() => /reload refused/.test(env.proxy.proc.output.slice(mark)), {what: 'the refusal'});
    assert.match(env.proxy.proc.output.slice(mark), /"other" is the label of every unnamed tenant/);
    const s = await env.proxy.stats();
    assert.equal(s.tenants.find((t) => t.id === idA).name, 'search team', 'the running names stay');
});

h.test('a names file that became a FIFO is refused on reload; the proxy keeps its names and stops', async () => {
    /* Opening a FIFO with no writer blocked the reload on the main thread, which then never saw
     * SIGTERM; a pipe read at start would read as empty on every reload. */
    const fifo = path.join(h.tmpDir('pc-tenants-fifo-'), 'tenants');
    fs.writeFileSync(fifo, `${idA} fifo team\n`);
    const proxy = await env.startProxy({args: ['--tenant-names', fifo]});
    fs.unlinkSync(fifo);
    execFileSync('mkfifo', [fifo]);
    const mark = proxy.proc.output.length;
    proxy.proc.signalIt('SIGHUP');
    await h.waitFor(() => /reload refused/.test(proxy.proc.output.slice(mark)), {what: 'the refusal'});
    assert.ok(proxy.proc.output.slice(mark).includes(`${fifo}: not a regular file`), proxy.proc.output.slice(mark));
    const r = await h.runCli(['-t', '--tenant-names', fifo], {timeout: 10000});
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /not a regular file/);
    assert.equal(await proxy.stop(), 0);
});
