'use strict';
/*
 * DELETE /admin/cache: needs Authorization: Bearer <admin-token> (401
 * otherwise), flushes every entry, or one tenant's with ?tenant=<id> where id
 * is the 16-hex-digit tenant id the access log shows.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const ADMIN_TOKEN = 'admin-token-for-tests';
const env = h.environment({proxyArgs: ['--admin-token', ADMIN_TOKEN]});

const CHAT = '/v1/chat/completions';

function flush(proxy, {token, tenant} = {}) {
    const headers = token === undefined ? {} : {authorization: `Bearer ${token}`};
    const path = tenant === undefined ? '/admin/cache' : `/admin/cache?tenant=${tenant}`;
    return h.request(proxy.url, {method: 'DELETE', path, headers});
}

/* Cache one answer for a tenant and return the body used. The answer is stored before it
 * is sent, so the repeat hits at once (asking until it hits would hide a miss that stored
 * nothing: the repeat would store it). */
async function cached(key, label) {
    const body = h.chatBody(h.uniq(label));
    h.assertFromUpstream(await env.proxy.post(CHAT, body, h.bearer(key)), env.mock);
    h.assertHit(await env.proxy.post(CHAT, body, h.bearer(key)));
    return body;
}

/*
 * The tenant id the access log shows for requests made with key: the line of
 * this very request, found by its id (an earlier request's line may still
 * be on its way).
 */
async function tenantIdOf(key, body) {
    const r = await env.proxy.post(CHAT, body, h.bearer(key));
    const id = r.headers['x-promptcache-request-id'];
    assert.ok(id, 'X-Promptcache-Request-Id');
    const line = await env.proxy.waitAccessLog((l) => l.id === id);
    assert.match(line.tenant, /^[0-9a-f]{16}$/);
    return line.tenant;
}

h.test('without the admin token: 401, nothing flushed', async () => {
    const body = await cached('sk-admin-a', 'admin 401');
    for (const token of [undefined, 'wrong-token', '']) {
        const r = await flush(env.proxy, {token});
        assert.equal(r.status, 401, `token ${JSON.stringify(token)}`);
    }
    h.assertHit(await env.proxy.post(CHAT, body, h.bearer('sk-admin-a')));
});

h.test('with the admin token: every entry is flushed', async () => {
    const a = await cached('sk-admin-a', 'flush all a');
    const b = await cached('sk-admin-b', 'flush all b');
    const r = await flush(env.proxy, {token: ADMIN_TOKEN});
    assert.ok(r.status >= 200 && r.status < 300, `DELETE /admin/cache: ${r.status} ${r.text}`);
    assert.deepEqual(await env.redis.keys('pc:2:e:*'), [], 'no entries left in Redis');
    h.assertFromUpstream(await env.proxy.post(CHAT, a, h.bearer('sk-admin-a')), env.mock);
    h.assertFromUpstream(await env.proxy.post(CHAT, b, h.bearer('sk-admin-b')), env.mock);
});

h.test('?tenant=<id> flushes only that tenant\'s entries', async () => {
    const a = await cached('sk-admin-a', 'flush tenant a');
    const b = await cached('sk-admin-b', 'flush tenant b');
    const tenantA = await tenantIdOf('sk-admin-a', a);
    assert.notEqual(tenantA, await tenantIdOf('sk-admin-b', b));

    const r = await flush(env.proxy, {token: ADMIN_TOKEN, tenant: tenantA});
    assert.ok(r.status >= 200 && r.status < 300, `DELETE /admin/cache?tenant: ${r.status} ${r.text}`);
    h.assertFromUpstream(await env.proxy.post(CHAT, a, h.bearer('sk-admin-a')), env.mock);
    h.assertHit(await env.proxy.post(CHAT, b, h.bearer('sk-admin-b')));
});

h.test('an invalid tenant id is a 400', async () => {
    const r = await flush(env.proxy, {token: ADMIN_TOKEN, tenant: 'not-hex*'});
    assert.equal(r.status, 400);
});

h.test('the schema version survives a flush', async () => {
    await flush(env.proxy, {token: ADMIN_TOKEN});
    assert.equal(await env.redis.command('GET', 'pc:schema'), String(h.latestSchemaVersion()));
    assert.equal((await env.proxy.get('/readyz')).status, 200);
});

h.test('without --admin-token the admin endpoints are closed', async () => {
    const proxy = await env.startProxy();
    const body = h.chatBody(h.uniq('no admin'));
    await proxy.post(CHAT, body);
    for (const token of [undefined, '', ADMIN_TOKEN]) {
        const r = await flush(proxy, {token});
        assert.ok(r.status >= 400 && r.status < 500, `DELETE without admin-token configured: ${r.status}`);
    }
    h.assertHit(await proxy.post(CHAT, body));
    assert.equal(await proxy.stop(), 0);
});
