"""Jobs that ship in the package: the demo's GRPO job (`rollmux.jobs.grpo`, needs the `demo` extra).

They use only what any user's job uses (the shim), so `rollmux profile rollmux.jobs.grpo` and
`rollmux demo` work from an installed wheel, without the source tree.
"""
