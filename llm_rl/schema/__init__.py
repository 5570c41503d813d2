"""The recipe schema: one typed, strict set of sections shared by every algorithm, and `Recipe`.

The ground floor of the library: it imports no algorithm. The shared sections are in our own words;
each algorithm's own section (`grpo:`, `ppo:`, ...) holds its trainer's field names, checked by the
algorithm (`llm_rl.algorithms`). Reading YAML into a `Recipe` is `llm_rl.recipe.load`.

- `section`: the base of every section, and `RuleBroken`, the error of a rule between keys;
- `sections`: run, model, rewards, generation, training, checkpointing, early stopping, evaluation,
  advantages;
- `data`: one dataset, a mixture, the built-in arithmetic task, held-out prompts;
- `monitoring`: wandb, Prometheus, TensorBoard and the alerts;
- `schedules`: settings that follow a schedule in samples;
- `recipe`: `Recipe`, its stages, and the rules between its sections.
"""

from llm_rl.schema.data import ArithmeticTaskSection, DataSection, DataSourceEntry
from llm_rl.schema.monitoring import (
    AlertAction,
    AlertsSection,
    BoundAlert,
    CollapseAlert,
    CountAlert,
    MonitoringSection,
    NonFiniteAlert,
    PrometheusSection,
    WandbSection,
)
from llm_rl.schema.recipe import SHARED_TRL_FIELDS, Recipe, StageEntry
from llm_rl.schema.schedules import (
    ConstantSchedule,
    CosineSchedule,
    LinearSchedule,
    RampSchedule,
    Schedule,
    StepSchedule,
)
from llm_rl.schema.section import RuleBroken, Section
from llm_rl.schema.sections import (
    AdvantagesSection,
    CheckpointingSection,
    EarlyStoppingSection,
    EvaluationSection,
    GenerationSection,
    LoraSection,
    ModelSection,
    RewardEntry,
    RunSection,
    TrainingSection,
    VLLMSection,
)

__all__ = [
    "SHARED_TRL_FIELDS",
    "AdvantagesSection",
    "AlertAction",
    "AlertsSection",
    "ArithmeticTaskSection",
    "BoundAlert",
    "CheckpointingSection",
    "CollapseAlert",
    "ConstantSchedule",
    "CosineSchedule",
    "CountAlert",
    "DataSection",
    "DataSourceEntry",
    "EarlyStoppingSection",
    "EvaluationSection",
    "GenerationSection",
    "LinearSchedule",
    "LoraSection",
    "ModelSection",
    "MonitoringSection",
    "NonFiniteAlert",
    "PrometheusSection",
    "RampSchedule",
    "Recipe",
    "RewardEntry",
    "RuleBroken",
    "RunSection",
    "Schedule",
    "Section",
    "StageEntry",
    "StepSchedule",
    "TrainingSection",
    "VLLMSection",
    "WandbSection",
]
