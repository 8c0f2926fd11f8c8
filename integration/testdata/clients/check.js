// Drive the official JavaScript Elasticsearch client against a URL and print what it saw, as one JSON
// object. Usage: node check.js <base url> <index> <other index> <query> [big]
// With "big", it also sends a 10 MB search body (the last row; slow on the node itself).
// integration/clients_test.go runs it against the sidecar and against Elasticsearch and compares; the
// assertions live there. Any error other than the ones probed here makes the run fail (non-zero exit).
'use strict'
const { Client, errors } = require('@elastic/elasticsearch')
const { version } = JSON.parse(require('fs').readFileSync(require.resolve('@elastic/elasticsearch').replace(/index\.js$/, 'package.json')))

async function main () {
  const [url, index, other, query, big] = process.argv.slice(2)
  const es = new Client({ node: url, requestTimeout: 60000 })
  const out = { client: 'javascript @elastic/elasticsearch ' + version }
  const info = await es.info({}, { meta: true })
  out.info = { status: info.statusCode, version: info.body.version.number, product: info.headers['x-elastic-product'] }
  out.ping = await es.ping()
  out.count = (await es.count({ index })).count
  const match = { match: { text: query } }
  const hits = (resp) => resp.hits.hits.map(h => ({
    id: h._id,
    source_keys: Object.keys(h._source || {}).sort(),
    provenance: (h._icicle || {}).provenance || null,
    score: h._score
  }))
  const t0 = performance.now()
  let resp = await es.search({ index, query: match, size: 10 }, { meta: true })
  out.search = {
    hits: hits(resp.body),
    took: resp.body.took,
    client_ms: performance.now() - t0,
    mode: (resp.body.icicle || {}).mode || null,
    total_ms: ((resp.body.icicle || {}).timings || {}).total_ms || null,
    content_type: resp.headers['content-type']
  }
  resp = await es.search({ query: match, size: 10 })
  out.search_no_index = { hits: hits(resp), indices: [...new Set(resp.hits.hits.map(h => h._index))].sort(), mode: (resp.icicle || {}).mode || null }
  resp = await es.search({ index, query: match, size: 10, _source: ['title'] })
  out.source_filter = { hits: hits(resp), mode: (resp.icicle || {}).mode || null }
  out.pages = []
  for (const from of [0, 5, 10]) out.pages.push(hits(await es.search({ index, query: match, size: 5, from })))
  resp = await es.search({ index, size: 0, aggs: { seen: { terms: { field: 'seen' } } } })
  out.aggs = resp.aggregations
  for (const [name, target] of [['other_index', other], ['wildcard', '*']]) {
    try {
      await es.search({ index: target, query: match })
      out[name] = { status: 200, error: null }
    } catch (e) {
      if (!(e instanceof errors.ResponseError)) throw e
      out[name] = { status: e.meta.statusCode, error: e.name, type: e.body && e.body.error && e.body.error.type }
    }
  }
  if (big === 'big') {
    try {
      await es.search({ index, query: { match: { text: 'x '.repeat(5 << 20) } }, size: 1 })
      out.big_body = { status: 200, error: null }
    } catch (e) {
      if (!(e instanceof errors.ResponseError)) throw e
      out.big_body = { status: e.meta.statusCode, error: e.name, type: e.body && e.body.error && e.body.error.type }
    }
  }
  process.stdout.write(JSON.stringify(out))
}

main().catch(e => { console.error(e); process.exit(1) })
