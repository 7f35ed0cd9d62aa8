// validate.cjs checks AsyncAPI documents with the AsyncAPI project's own
// parser, which validates a 3.0.0 document against the specification's JSON
// Schema (bindings included) and its rules. It also checks each message's
// examples against the message's payload and headers schemas, which the
// parser leaves alone for 3.0.0. An example's headers are checked without
// the schema's required list: an example gives the headers the schema
// knows, not the ids a producer sets.
//
// Usage: node validate.cjs [--resolved <dir>] <document>...
// (NODE_PATH names the modules). It prints one line per problem and a
// summary per document, and exits 1 when any document has an error or a
// warning. With --resolved it writes each valid document as the parser read
// it, its references resolved, to <dir>/<name>.resolved.json, for the test
// to read facts from.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { Parser, DiagnosticSeverity } = require('@asyncapi/parser');
const Ajv = require('ajv');
const addFormats = require('ajv-formats');

async function main(args) {
  let resolved = '';
  if (args[0] === '--resolved') {
    resolved = args[1];
    args = args.slice(2);
  }
  const files = args;
  const parser = new Parser();
  let failed = false;
  for (const file of files) {
    const { document, diagnostics } = await parser.parse(fs.readFileSync(file, 'utf8'), { source: file });
    let problems = 0;
    for (const d of diagnostics) {
      if (d.severity > DiagnosticSeverity.Warning) {
        continue; // information and hints, such as a newer AsyncAPI existing
      }
      problems++;
      console.log(`${file}: ${d.code}: ${d.message} at ${d.path.join('.')}`);
    }
    let examples = 0;
    if (document) {
      // draft-07 with AsyncAPI's own keywords and the x- extensions beside it.
      const ajv = new Ajv({ strict: false, allErrors: true });
      addFormats(ajv);
      for (const message of document.allMessages()) {
        const payload = message.payload() && message.payload().json();
        const headers = message.headers() && { ...message.headers().json(), required: [] };
        for (const example of message.examples()) {
          examples++;
          for (const [what, schema, value] of [['payload', payload, example.payload()], ['headers', headers, example.headers()]]) {
            if (!schema || value === undefined) {
              continue;
            }
            if (!ajv.validate(schema, value)) {
              problems++;
              console.log(`${file}: example of ${message.id()}: ${what}: ${ajv.errorsText()}`);
            }
          }
        }
      }
      if (resolved) {
        const name = path.basename(file).replace(/\.ya?ml$/, '');
        fs.writeFileSync(path.join(resolved, name + '.resolved.json'), JSON.stringify(document.json()));
      }
    } else {
      problems++;
      console.log(`${file}: not a valid AsyncAPI document`);
    }
    failed = failed || problems > 0;
    console.log(`${file}: ${problems === 0 ? 'valid' : 'INVALID'} (${document ? document.allMessages().length : 0} messages, ${examples} examples checked)`);
  }
  return failed ? 1 : 0;
}

main(process.argv.slice(2)).then((code) => { process.exitCode = code; }, (err) => {
  console.log(err && err.stack || String(err));
  process.exitCode = 2;
});
