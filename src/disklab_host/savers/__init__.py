"""The checkpoint savers users run (torch.distributed.checkpoint, Hugging Face, accelerate, Lightning),
judged under a kill and a power cut as the lab's own recipes are.

``registry`` names them (standard library only); ``model`` makes the one Llama-shaped state they all save;
``frameworks`` calls each framework's own save and load (``dcp_rank``: one rank of a DCP save); ``judge``
says what a restart finds in a checkpoint directory, tensor by tensor; ``traced`` is the process that saves
(under the power-cut recorder, or at the crash lab's ``gate``); ``powercut`` records and classifies a
saver's crash states; ``kill`` kills its saves at exact calls; ``mechanism`` names what its recording shows;
``check`` is ``disklab powercut --saver``.
"""
