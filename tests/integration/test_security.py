"""Security in the real lab: systemd's own reading of hostile values, planted links, the dotfiles rc."""

import pytest

from sglang_pve.config import ConfigError, load_deployment
from sglang_pve.render import server_files
from tests.conftest import PROJECT
from tests.hostile import VALUES, data_for, systemd_words
from tests.integration.conftest import grand_total, on_target, put_file, pyinfra, sh

pytestmark = pytest.mark.lab

PROBE_UNIT = "/etc/systemd/system/sgpve-hostile-probe.service"  # not sglang-*: the deploy never sees it


def test_systemd_reads_every_accepted_hostile_value_back_exactly(lab, tmp_path):
    accepted = {}
    for value in VALUES:
        try:
            load_deployment("sglang1", data_for("env value", value, tmp_path), PROJECT)
        except ConfigError:
            continue
        accepted[f"SGLANG_HOSTILE_{len(accepted)}"] = value
    assert len(accepted) >= 25  # quotes, $(...), backticks, ;, %, spaces, backslashes, non-ASCII digits...
    deployment = load_deployment("sglang1", data_for("env value", "x", tmp_path), PROJECT)
    server = deployment.servers["baseline"]
    server = type(server)(server.name, server.args, accepted, server.lifecycle)
    unit = server_files(deployment, server, "/opt/sglang/venvs/x")[0].content
    put_file(PROBE_UNIT, unit)
    try:
        sh("systemctl daemon-reload")
        shown = sh(f"systemctl show -p Environment -p Description --value {PROBE_UNIT.rsplit('/', 1)[1]}").splitlines()
        environment = dict(word.split("=", 1) for word in systemd_words(shown[0]))
        assert {name: environment.get(name) for name in accepted} == accepted
        assert len(environment) == 2 + len(accepted)  # nothing split, nothing added
        assert shown[1] == f"SGLang server baseline ({server.args.served_model_name})"
    finally:
        sh(f"rm -f {PROBE_UNIT}; systemctl daemon-reload")


CANARY = "/root/canary"
USER_DATA = ["--data", "shell_user=dev", "--data", "shell_rc=/home/dev/.zshrc"]


@pytest.fixture
def dev_user(lab):
    sh("id dev >/dev/null 2>&1 || useradd -m -s /usr/bin/zsh dev; rm -rf /home/dev/.zshrc /home/dev/dotfiles; "
       f"printf 'CANARY root-only\\n' > {CANARY}; chmod 600 {CANARY}; for n in 1 2 3; do cp -p {CANARY} {CANARY}$n; done")
    yield "dev"
    sh(f"rm -f {CANARY} {CANARY}1 {CANARY}2 {CANARY}3 /etc/nccl.conf.sglang-pve-new; rm -rf /home/dev/.zshrc /home/dev/dotfiles "
       "/home/dev/.zshrc.sglang-pve-new")
    pyinfra(deploy="tasks/nccl_env.py")  # managed files back as the shipped deploy leaves them


def canaries() -> str:
    return sh(f"stat -c '%n %a %U %s %Y' {CANARY} {CANARY}1 {CANARY}2 {CANARY}3; cat {CANARY}*")


def test_a_planted_link_at_the_rc_towards_a_root_file_is_refused_untouched(dev_user):
    sh(f"runuser -u dev -- ln -s {CANARY} /home/dev/.zshrc")
    before = canaries()
    code, output = pyinfra(*USER_DATA, deploy="tasks/nccl_env.py", check=False)
    assert code != 0 and "belongs to root, not dev" in output and "a link to /root/canary" in output, output
    assert "CANARY" not in output  # the root-only file was never read back
    assert canaries() == before and sh("readlink /home/dev/.zshrc").strip() == CANARY


def test_links_at_managed_paths_and_old_temp_names_leave_their_targets_untouched(dev_user):
    # a dotfiles user: the rc is a link into their own repository, mode 600
    sh("runuser -u dev -- sh -c 'mkdir ~/dotfiles && printf \"alias ll=ls\\n\" > ~/dotfiles/zshrc && chmod 600 ~/dotfiles/zshrc "
       "&& ln -s dotfiles/zshrc ~/.zshrc'")
    # links at a managed path and at the temporary names the deploy used to write through
    sh(f"ln -sfn {CANARY}1 /etc/nccl.conf; ln -s {CANARY}2 /etc/nccl.conf.sglang-pve-new; "
       f"runuser -u dev -- ln -s {CANARY}3 /home/dev/.zshrc.sglang-pve-new")
    before = canaries()
    pyinfra(*USER_DATA, deploy="tasks/nccl_env.py")
    assert canaries() == before
    assert sh("stat -c '%F %U %a' /etc/nccl.conf").strip() == "regular file root 644"
    assert "NCCL_PROTO=LL" in sh("cat /etc/nccl.conf")
    assert sh("readlink /home/dev/.zshrc").strip() == "dotfiles/zshrc"  # the link survives...
    target = sh("cat /home/dev/dotfiles/zshrc")
    assert target.startswith("alias ll=ls\n") and "# >>> sglang-pve nccl-profile >>>" in target  # ...the block is inside
    assert sh("stat -c '%U %a' /home/dev/dotfiles/zshrc").strip() == "dev 600"
    # zsh itself reads the block back: exactly the profile's values
    assert on_target("runuser", "-u", "dev", "--", "zsh", "-i", "-c", "printenv NCCL_PROTO NCCL_NTHREADS").stdout.split() == ["LL", "512"]
    assert not sh("ls -A /home/dev/dotfiles /etc | grep -c '^\\.sglang-pve' || true").strip().strip("0")  # no temp left
    _, again = pyinfra(*USER_DATA, deploy="tasks/nccl_env.py")
    assert grand_total(again)["changed"] == 0  # and the next deploy finds it up to date
