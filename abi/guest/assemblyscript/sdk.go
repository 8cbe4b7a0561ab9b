// Package assemblyscript is the AssemblyScript guest SDK of ssrun
// WebAssembly rules (assembly/index.ts; README.md). Its Go side only embeds
// the SDK's sources, so that `ssrun new assemblyscript` can copy them into
// a new rule's folder: a rule that builds without an ssrun checkout.
package assemblyscript

import "embed"

// SDK holds the files a rule builds with: asconfig.json (which the rule's
// own extends) and assembly/*.ts.
//
//go:embed asconfig.json assembly/*.ts
var SDK embed.FS
