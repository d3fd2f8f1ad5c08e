// prepare: builds dist/src, what the package ships, from src/. npm runs it
// after `npm ci` or `npm install` in this folder, before `npm pack` and
// `npm publish`, and in this folder when another project installs it by
// its path (`npm install /path/to/clients/typescript`) or from git.
//
// Installed by its path, npm links the folder and runs prepare there
// without installing its devDependencies, so on a fresh clone there is no
// compiler yet: then this installs them first, exactly as the lock file
// has them (`npm ci --ignore-scripts`, with the npm that runs this and the
// caller's npm settings), and builds.
import { execFileSync } from 'node:child_process'
import { existsSync, rmSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc')

if (!existsSync(tsc)) {
  const npm = process.env.npm_execpath
  if (!npm) {
    throw new Error(`prepare: the compiler is not installed in ${root}; run npm ci there first`)
  }
  // The caller's settings (--prefer-offline, a registry, a cache) come
  // through npm_config_*; a global install's do not apply to this folder,
  // and the build needs the devDependencies whatever NODE_ENV or --omit say.
  const env = { ...process.env }
  for (const k of ['npm_config_global', 'npm_config_location', 'npm_config_local_prefix']) delete env[k]
  process.stderr.write(`prepare: installing the build's tools in ${root} (npm ci)\n`)
  const [cmd, args] = /\.[cm]?js$/.test(npm) ? [process.execPath, [npm]] : [npm, []]
  execFileSync(cmd, [...args, 'ci', '--ignore-scripts', '--include=dev', '--no-audit', '--no-fund'], {
    cwd: root,
    env,
    stdio: ['ignore', 'inherit', 'inherit'],
  })
}

// A clean output: a source removed since the last build leaves no module behind.
rmSync(join(root, 'dist', 'src'), { recursive: true, force: true })
execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { cwd: root, stdio: 'inherit' })
