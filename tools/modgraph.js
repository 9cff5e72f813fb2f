#!/usr/bin/env node
/*
 * tools/modgraph.js - the module graph of the built tree: which module calls
 * which (read from the object files with nm: module A calls module B when an
 * undefined symbol of A is defined by B, so only calls the linker resolves
 * count) and which includes which (the #include "pc_*.h" lines of src/ and
 * include/). A module is src/NAME.c; a family folder src/NAME/ counts as
 * part of module NAME (its members and their core are one family), and
 * include/pc_NAME.h belongs to module NAME. Prints both graphs, one module a
 * line with what it reaches, then every cycle (strongly connected component
 * of more than one module) of each.
 *
 *   make modgraph                  (after make: the objects must exist)
 *   node tools/modgraph.js [OBJDIR] [--dot]
 *
 * --dot prints the call graph in Graphviz form instead.
 * Exit status 0, whatever the graph: it reports, it does not judge.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const top = path.resolve(__dirname, '..');
const args = process.argv.slice(2);
const dot = args.includes('--dot');
const objdir = path.resolve(args.find(a => !a.startsWith('--')) || path.join(top, 'build/obj'));

/* The module of a source path relative to src/ ("backend/vllm.c" -> "backend"). */
function moduleOf(rel) {
    const parts = rel.split('/');
    return parts[0].replace(/\.(c|cc|o)$/, '');
}

/* Every object under objdir except main and the generated ones, by module. */
function objects() {
    const out = [];
    const walk = dir => {
        for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
            const p = path.join(dir, e.name);
            if (e.isDirectory()) walk(p);
            else if (e.name.endsWith('.o')) out.push(p);
        }
    };
    walk(objdir);
    return out
        .map(p => ({ path: p, mod: moduleOf(path.relative(objdir, p)) }))
        .filter(o => !o.mod.startsWith('gen_') && o.mod !== 'faiss_c');
}

function callGraph() {
    const defs = new Map(); /* symbol -> module */
    const undefs = new Map(); /* module -> Set of symbols */
    for (const o of objects()) {
        const text = execFileSync('nm', ['--defined-only', '-g', o.path]).toString();
        for (const line of text.split('\n')) {
            const m = line.match(/^\S+\s+[TDBR]\s+(\S+)$/);
            if (m) defs.set(m[1], o.mod);
        }
        const u = execFileSync('nm', ['-u', o.path]).toString();
        const set = undefs.get(o.mod) || new Set();
        for (const line of u.split('\n')) {
            const m = line.match(/^\s*U\s+(\S+)$/);
            if (m) set.add(m[1]);
        }
        undefs.set(o.mod, set);
    }
    const g = new Map();
    for (const [mod, syms] of undefs) {
        const to = g.get(mod) || new Set();
        for (const s of syms) {
            const d = defs.get(s);
            if (d !== undefined && d !== mod) to.add(d);
        }
        g.set(mod, to);
    }
    return g;
}

/*
 * A header of a family folder included from outside the family (the lists
 * src/backend/backends.h, src/route/policies.h) is a node of its own,
 * "backend/backends", with its own includes: reading a family's list of
 * names is not depending on the family's code.
 */
function includeGraph() {
    const g = new Map();
    const src = path.join(top, 'src');
    const add = (from, file) => {
        const text = fs.readFileSync(file, 'utf8');
        const to = g.get(from) || new Set();
        for (const m of text.matchAll(/^#include "([a-z0-9_/]+)\.h"/gm)) {
            const inc = m[1];
            let node = inc.startsWith('pc_') ? inc.slice(3) : null;
            const slash = inc.lastIndexOf('/');
            if (slash >= 0) {
                const fam = inc.slice(0, slash).split('/').pop();
                if (fam === from) continue;
                node = inc;
                if (!g.has(node)) add(node, path.join(src, inc + '.h'));
            }
            if (node !== null && node !== from) to.add(node);
        }
        g.set(from, to);
    };
    const walk = dir => {
        for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
            const p = path.join(dir, e.name);
            if (e.isDirectory()) walk(p);
            else if (/\.(c|cc|h)$/.test(e.name) && e.name !== 'main.c')
                add(moduleOf(path.relative(src, p)), p);
        }
    };
    walk(src);
    for (const f of fs.readdirSync(path.join(top, 'include')))
        if (/^pc_.*\.h$/.test(f)) add(f.slice(3, -2), path.join(top, 'include', f));
    return g;
}

/* Tarjan's strongly connected components of more than one node. */
function cycles(g) {
    let index = 0;
    const idx = new Map(), low = new Map(), on = new Set(), stack = [], out = [];
    const visit = v => {
        idx.set(v, index);
        low.set(v, index++);
        stack.push(v);
        on.add(v);
        for (const w of g.get(v) || []) {
            if (!idx.has(w)) {
                visit(w);
                low.set(v, Math.min(low.get(v), low.get(w)));
            } else if (on.has(w)) {
                low.set(v, Math.min(low.get(v), idx.get(w)));
            }
        }
        if (low.get(v) === idx.get(v)) {
            const comp = [];
            let w;
            do {
                w = stack.pop();
                on.delete(w);
                comp.push(w);
            } while (w !== v);
            if (comp.length > 1) out.push(comp.sort());
        }
    };
    for (const v of [...g.keys()].sort()) if (!idx.has(v)) visit(v);
    return out;
}

/* The edges inside one component, so a cycle can be read and cut. */
function inner(g, comp) {
    const s = new Set(comp);
    const edges = [];
    for (const a of comp)
        for (const b of [...(g.get(a) || [])].sort()) if (s.has(b)) edges.push(`${a}->${b}`);
    return edges;
}

function print(title, g) {
    console.log(`## ${title}`);
    for (const m of [...g.keys()].sort()) console.log(`${m}: ${[...g.get(m)].sort().join(' ')}`);
    const cs = cycles(g);
    console.log(`\n## ${title}: ${cs.length} cycle${cs.length === 1 ? '' : 's'}`);
    for (const c of cs) console.log(`{${c.join(' ')}}\n    ${inner(g, c).join(' ')}`);
    console.log('');
}

const calls = callGraph();
if (dot) {
    console.log('digraph calls {\n  rankdir=LR;');
    for (const m of [...calls.keys()].sort())
        for (const t of [...calls.get(m)].sort()) console.log(`  "${m}" -> "${t}";`);
    console.log('}');
} else {
    print('calls', calls);
    print('includes', includeGraph());
}
