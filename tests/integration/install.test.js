'use strict';
/*
 * `make install` and `make uninstall` into a DESTDIR. Uninstall removes the
 * files install put there and then the folders it made if they are empty:
 * an operator may point DATADIR or DOCDIR at a shared folder (DATADIR=
 * /usr/share), whose other files must outlive the uninstall (it ran
 * `rm -rf $(DATADIR) $(DOCDIR)`).
 */
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const {spawnSync} = require('node:child_process');
const h = require('./lib');

/* make in the repository with these variables; the binary is the one under test, never rebuilt. */
function make(target, vars) {
    const bin = h.proxyBin();
    const args = ['--no-print-directory', '-o', bin, target, `BIN=${bin}`,
        ...Object.entries(vars).map(([k, v]) => `${k}=${v}`)];
    const r = spawnSync('make', args, {cwd: h.REPO, encoding: 'utf8'});
    assert.equal(r.status, 0, `make ${target}: ${r.stdout}\n${r.stderr}`);
    return r.stdout;
}

const exists = (p) => fs.existsSync(p);

h.test('make uninstall removes what install put there and the folders it made, nothing else', () => {
    const dest = h.tmpDir('pc-install-');
    const vars = {DESTDIR: dest, PREFIX: '/usr'};
    make('install', vars);
    const data = path.join(dest, 'usr/share/promptcache');
    const docs = path.join(dest, 'usr/share/doc/promptcache');
    for (const p of [path.join(dest, 'usr/bin/promptcache'), path.join(data, 'pricing.json'),
        path.join(docs, 'README.md'), path.join(docs, 'promptcache.conf'), path.join(docs, 'doc/caching.md'),
        path.join(dest, 'usr/share/man/man1/promptcache.1')])
        assert.ok(exists(p), `installed: ${p}`);
    /* Another package's file beside ours in the shared doc folder. */
    fs.writeFileSync(path.join(dest, 'usr/share/doc/other.txt'), 'not ours');
    make('uninstall', vars);
    assert.equal(exists(path.join(dest, 'usr/bin/promptcache')), false);
    assert.equal(exists(data), false, 'the data folder, made by install, is gone');
    assert.equal(exists(docs), false, 'the doc folder, made by install, is gone');
    assert.equal(exists(path.join(dest, 'usr/share/man/man1/promptcache.1')), false);
    assert.equal(fs.readFileSync(path.join(dest, 'usr/share/doc/other.txt'), 'utf8'), 'not ours');
});

h.test('make uninstall with DATADIR and DOCDIR set to shared folders leaves their other files', () => {
    const dest = h.tmpDir('pc-install-shared-');
    const vars = {DESTDIR: dest, PREFIX: '/usr', DATADIR: '/usr/share', DOCDIR: '/usr/share/doc'};
    const share = path.join(dest, 'usr/share');
    fs.mkdirSync(path.join(share, 'doc/other'), {recursive: true});
    fs.writeFileSync(path.join(share, 'other-data.json'), '{}');
    fs.writeFileSync(path.join(share, 'doc/other/README'), 'not ours');
    make('install', vars);
    assert.ok(exists(path.join(share, 'pricing.json')));
    assert.ok(exists(path.join(share, 'doc/README.md')));
    make('uninstall', vars);
    assert.equal(exists(path.join(share, 'pricing.json')), false);
    assert.equal(exists(path.join(share, 'doc/README.md')), false);
    assert.equal(exists(path.join(share, 'doc/doc')), false, 'the doc/ folder install made is gone');
    assert.equal(fs.readFileSync(path.join(share, 'other-data.json'), 'utf8'), '{}');
    assert.equal(fs.readFileSync(path.join(share, 'doc/other/README'), 'utf8'), 'not ours');
});
