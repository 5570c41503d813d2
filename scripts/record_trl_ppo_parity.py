"""Record what TRL 1.12's own PPO script did on two updates, for `tests/algorithms/test_trl_ppo_parity.py`.

Run it in an environment of its own with trl==1.12.0 (the last release with PPOTrainer), not llm_rl's:

    python -m venv /tmp/trl112 && /tmp/trl112/bin/pip install torch==2.13.0 trl==1.12.0
    /tmp/trl112/bin/python scripts/record_trl_ppo_parity.py --trl-script PATH/TO/trl/examples/scripts/ppo/ppo.py

`--trl-script` is TRL's `examples/scripts/ppo/ppo.py` as it stood in 1.12 (the file is not in TRL's
wheel; take it from a TRL checkout of that release). The launch command in `LAUNCH` below runs it
unchanged, on the parity policy (tests/fixtures/ppo_parity_model) and a tiny reward model that shares
its tokenizer, written here beside the fixture. CPU, fp32, seed 0.

For each update the fixture keeps the locals of TRL's `PPOTrainer.train` once its rollout is complete
(queries, responses, log-probs, reference log-probs, values, scores, KL, rewards, advantages, returns),
the shuffles it drew, each micro-batch's losses, the gradient norms before each optimizer step, the
metrics it logged, and digests of the final weights. Nothing of TRL is patched: the values are read
from the running trainer's frame by a trace function.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import runpy
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
OUT = FIXTURES / "trl_ppo_parity"

# TRL's ppo.py as its users launched it, on local models; `{fixtures}` and `{output}` are filled in.
LAUNCH = """python examples/scripts/ppo/ppo.py \\
    --dataset_name {fixtures}/trl_ppo_parity/prompts \\
    --dataset_train_split train \\
    --output_dir {output} \\
    --per_device_train_batch_size 4 \\
    --gradient_accumulation_steps 2 \\
    --total_episodes 16 \\
    --learning_rate 1e-3 \\
    --model_name_or_path {fixtures}/ppo_parity_model \\
    --sft_model_path {fixtures}/ppo_parity_model \\
    --reward_model_path {fixtures}/trl_ppo_parity/reward_model \\
    --local_rollout_forward_batch_size 8 \\
    --response_length 2 \\
    --missing_eos_penalty 1.0 \\
    --stop_token eos \\
    --num_sample_generations 0 \\
    --bf16 false \\
    --report_to none \\
    --seed 0
"""

# The rollout's tensors, read from TRL's frame when its first PPO epoch begins.
ROLLOUT = (
    "queries", "query_responses", "responses", "postprocessed_responses", "logprobs", "ref_logprobs",
    "scores", "sequence_lengths", "values", "padding_mask", "padding_mask_p1", "kl", "non_score_reward",
    "rewards", "advantages", "returns",
)  # fmt: skip
MICRO = ("pg_loss", "vf_loss", "pg_clipfrac", "vf_clipfrac", "approxkl", "loss")


def write_prompts(folder: Path) -> None:
    """Arithmetic prompts in a `prompt` column: TRL's script trains on all but the last 100 rows."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": f"{a}+{b}="} for a in range(13) for b in range(13)]
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def write_reward_model(folder: Path, policy: Path) -> None:
    """A small random sequence classifier with the policy's tokenizer, as TRL's pairs shared theirs."""
    from transformers import AutoConfig, AutoTokenizer, LlamaForSequenceClassification

    config = AutoConfig.from_pretrained(policy)
    config.update({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_labels": 1})
    config.num_attention_heads = config.num_key_value_heads = 2
    config.architectures = ["LlamaForSequenceClassification"]
    torch.manual_seed(1234)
    model = LlamaForSequenceClassification(config)
    # A score head large enough that rewards differ visibly between completions.
    torch.nn.init.normal_(model.score.weight, std=1.0)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(policy).save_pretrained(folder)


def digest(folder: Path) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def weight_digests(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Per tensor: sum, sum of squares, and a dot product with a fixed random probe."""
    probe = torch.Generator().manual_seed(0)
    out = {}
    for name, param in model.named_parameters():
        flat = param.detach().double().flatten()
        weights = torch.randn(flat.numel(), generator=probe, dtype=torch.float64)
        out[name] = torch.stack([flat.sum(), (flat * flat).sum(), (flat * weights).sum()])
    return out


class Recorder:
    """A trace function on `PPOTrainer.train` that copies its locals at three lines of each update."""

    def __init__(self, trainer_class: type) -> None:
        self.code = trainer_class.train.__code__
        lines, first = __import__("inspect").getsourcelines(trainer_class.train)
        self.epoch_line = first + next(i for i, s in enumerate(lines) if "for ppo_epoch_idx in range" in s)
        self.step_line = first + next(i for i, s in enumerate(lines) if s.strip() == "optimizer.step()")
        self.micro_end_line = first + next(
            i for i, s in enumerate(lines) if s.strip() == "gradient_accumulation_idx += 1"
        )
        self.updates: list[dict] = []
        self.trainer = None

    def __call__(self, frame, event, arg):
        if event == "call" and frame.f_code is self.code:
            self.trainer = frame.f_locals["self"]
            return self.trace_line
        return None

    def trace_line(self, frame, event, arg):
        if event != "line":
            return self.trace_line
        local = frame.f_locals
        if frame.f_lineno == self.epoch_line and len(self.updates) < local["update"]:
            self.updates.append(
                {
                    **{k: local[k].detach().clone() for k in ROLLOUT},
                    "context_length": local["context_length"],
                    "orders": [],
                    "micro": [],
                    "norms": [],
                }
            )
        elif frame.f_lineno == self.step_line and local["accelerator"].sync_gradients:
            model = local["model"]
            self.updates[-1]["norms"].append(
                {
                    "grad_norm": grad_norm(model.policy.parameters()),
                    "value/grad_norm": grad_norm(model.value_model.parameters()),
                    "policy_parameters": {
                        name: p.grad.detach().norm() for name, p in model.policy.named_parameters()
                    },
                }
            )
        elif frame.f_lineno == self.micro_end_line:
            micro = {k: local[k].detach().clone() for k in MICRO}
            micro.update(index=torch.as_tensor(local["micro_batch_inds"].copy()), ratio=local["ratio"].mean())
            self.updates[-1]["micro"].append(micro)
        return self.trace_line


def grad_norm(parameters) -> torch.Tensor:
    """The joint L2 norm, from per-tensor norms in float64 (a float32 norm of all gradients laid end to end
    drifts by 1e-4 on this model)."""
    return torch.stack([p.grad.detach().double().norm() for p in parameters if p.grad is not None]).norm()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--trl-script", type=Path, required=True, help="TRL 1.12's examples/scripts/ppo/ppo.py"
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/trl_ppo_parity_run"))
    args = parser.parse_args()
    import trl
    from trl.experimental.ppo import PPOTrainer

    if trl.__version__ != "1.12.0":
        sys.exit(f"needs trl 1.12.0 (found {trl.__version__})")
    policy = FIXTURES / "ppo_parity_model"
    write_prompts(OUT / "prompts")
    write_reward_model(OUT / "reward_model", policy)

    recorder = Recorder(PPOTrainer)
    logged: list[dict] = []
    original_log = PPOTrainer.log

    def log(self, logs, *rest, **kwargs):
        logged.append(dict(logs))
        return original_log(self, logs, *rest, **kwargs)

    original_permutation = np.random.permutation

    def permutation(n):
        order = original_permutation(n)
        recorder.updates[-1]["orders"].append(torch.as_tensor(order.copy()))
        return order

    command = shlex.split(LAUNCH.format(fixtures=FIXTURES, output=args.work).replace("\\\n", " "))
    sys.argv = [str(args.trl_script), *command[2:]]
    PPOTrainer.log = log
    np.random.permutation = permutation
    sys.settrace(recorder)
    try:
        runpy.run_path(str(args.trl_script), run_name="__main__")
    finally:
        sys.settrace(None)
        np.random.permutation = original_permutation
        PPOTrainer.log = original_log

    model = recorder.trainer.model
    fixture = {
        "launch": LAUNCH,
        "trl_version": trl.__version__,
        "torch_version": torch.__version__,
        "transformers_version": __import__("transformers").__version__,
        "model_sha256": {"policy": digest(policy), "reward_model": digest(OUT / "reward_model")},
        "pad_token_id": recorder.trainer.processing_class.pad_token_id,
        "updates": recorder.updates,
        "metrics": [m for m in logged if "objective/kl" in m],
        "final_weights": {
            "policy": weight_digests(model.policy),
            "value_model": weight_digests(model.value_model),
        },
    }
    torch.save(fixture, OUT / "trl_run.pt")
    # The history TRL wrote into its last checkpoint, as `llm-rl compare` reads a TRL output folder.
    state = args.work / "checkpoint-2" / "trainer_state.json"
    (OUT / "trl_output" / state.parent.name).mkdir(parents=True, exist_ok=True)
    shutil.copy(state, OUT / "trl_output" / state.parent.name / state.name)
    for number, metrics in enumerate(fixture["metrics"], 1):
        print(
            f"update {number}: scores {metrics['objective/scores']:.4g} kl {metrics['objective/kl']:.3g} "
            f"policy loss {metrics['loss/policy_avg']:.5g} value loss {metrics['loss/value_avg']:.5g}"
        )
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
