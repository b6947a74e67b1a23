#!/bin/bash
# Run inside an overlay sandbox by cmd/applygit_engine_test.go: it plants, in the workspace,
# every way the test knows to make git on the host run a command once the sandbox's changes
# are applied. Each planted command appends its vector's name to $1, a path on the host.
# It also makes one harmless change the host must receive, and links that leave the project.
set -euo pipefail
mark=$1
cd /workspace

# plant NAME prints a shell command that records NAME in the host's marker file.
plant() { printf 'echo %s >> %s; false' "$1" "$mark"; }

# A config that keeps a repository working (objects and refs through links) and runs a
# command at every git status: the commondir redirection.
# redirect GITDIR NAME NEW OLD: GITDIR's commondir becomes NEW (inside it), whose objects and
# refs are links to OLD's, the common directory it had (relative to NEW).
redirect() {
	local gitdir=$1 name=$2 new=$3 old=$4
	printf '%s\n' "$new" > "$gitdir/commondir"
	mkdir -p "$gitdir/$new"
	cp "$gitdir/$new/$old/config" "$gitdir/$new/config"
	printf '[core]\n\tfsmonitor = "%s"\n' "$(plant "$name")" >> "$gitdir/$new/config"
	ln -s "$old/objects" "$gitdir/$new/objects"
	ln -s "$old/refs" "$gitdir/$new/refs"
}

hook() {
	mkdir -p "$(dirname "$1")"
	printf '#!/bin/sh\n%s\n' "$(plant "$2")" > "$1"
	chmod 755 "$1"
}

redirect .git commondir x ..
printf '[core]\n\tfsmonitor = "%s"\n' "$(plant config)" >> .git/config
hook .git/hooks/pre-commit hooks
hook tools/hooks/pre-commit hookspath
hook tools/hooks/post-commit hookspath

# The config the repository includes from the project, with a filter the attributes turn on.
printf '[filter "sbx"]\n\tclean = "%s"\n\tsmudge = cat\n' "$(plant include)" >> gitcfg/extra
printf '* filter=sbx\n' > .gitattributes
printf '[submodule "vendor/lib"]\n\tpath = vendor/lib\n\turl = ext::sh -c planted\n' > .gitmodules

# A submodule's and a linked worktree's own git directories.
printf '[core]\n\tfsmonitor = "%s"\n' "$(plant module)" >> .git/modules/vendor/lib/config
hook .git/modules/vendor/lib/hooks/pre-commit module-hook
redirect .git/worktrees/wt worktree y ../../..
printf '[core]\n\tfsmonitor = "%s"\n' "$(plant config-worktree)" > .git/worktrees/wt/config.worktree

# A nested repository, and a directory of the project that becomes one through a .git file.
redirect nested/.git nested z ..
mkdir -p plain/evil/objects plain/evil/refs
printf 'ref: refs/heads/main\n' > plain/evil/HEAD
printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "%s"\n' "$(plant pointer)" > plain/evil/config
printf 'gitdir: evil\n' > plain/.git

# A bare repository in a new directory: git run there would read its config.
mkdir -p bare/objects bare/refs
printf 'ref: refs/heads/main\n' > bare/HEAD
printf '[core]\n\tbare = true\n\tpager = "%s"\n[alias]\n\tst = "!%s"\n' "$(plant bare)" "$(plant bare)" > bare/config

# Case and trailing-dot spellings that name .git on other file systems.
mkdir -p .GIT .git.
printf 'x\n' > .GIT/config
printf 'x\n' > .git./config

# Links whose targets leave the project, and one that stays inside.
ln -s /etc/passwd leak-abs
ln -s ../../outside leak-up
ln -s src/app.py inside-link

# The changes the host is meant to get: a file, a directory, a mode.
printf 'print("changed in the sandbox")\n' > src/app.py
mkdir emptydir
chmod 600 README
