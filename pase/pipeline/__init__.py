"""Pipeline parallelism: stages on sub-meshes, micro-batches, 1F1B, interleaved and GPipe.

    >>> from pase.pipeline import solve_pipeline
    >>> plan = solve_pipeline("chain", 4, batch=8, cluster="dgx-a100")
    >>> plan.devices, sum(st.devices for st in plan.stages)
    (4, 4)

- :mod:`pase.pipeline.cuts`: where stages may begin, what crosses a cut;
- :mod:`pase.pipeline.stages`: one stage solved by the per-layer dp (cached);
- :mod:`pase.pipeline.schedules`: the schedules' in-flight counts and steps, and
  :func:`~pase.pipeline.schedules.plan_step`, the one rule a plan's step is priced by;
- :mod:`pase.pipeline.search`: the priced step and the exact outer search;
- :mod:`pase.pipeline.price`: a stage as the search charges it (what its tax hid);
- :mod:`pase.pipeline.reprice`: a written plan's one price, from scratch;
- :mod:`pase.pipeline.plan`: the plan, its table and its JSON;
- :mod:`pase.pipeline.solve`: :func:`solve_pipeline`, the entry point, and its bound.

``docs/pipelines.md`` explains the model and the declared search space.
"""
from pase.pipeline.plan import PipelinePlan, PipelineStage, read_pipeline_plan
from pase.pipeline.solve import solve_pipeline

__all__ = ["PipelinePlan", "PipelineStage", "read_pipeline_plan", "solve_pipeline"]
