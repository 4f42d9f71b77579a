"""PerfLLM, the learned agent (section 3 of the paper): program embeddings from a pretrained
transformer, and a dueling Double DQN with Max-Q targets that learns which legal move to play.

    embed.py       Embedder: E(program), windows of whole lines through a local Hugging Face model
    qnet.py        DuelingQNet: Q(s, a) over however many actions a state has
    replay.py      ReplayBuffer, Transition: bounded experience replay, sampled uniformly
    learner.py     Learner: epsilon-greedy actions, max-Bellman Double-DQN updates, the target network
    game.py        legal_moves, successors, Costs: the game's rules and what a program costs
    play.py        play, continue_: the game loop; a trained agent continuing a program
    search.py      search: the agent as a search for `dojo tune --method agent`, best first by Q
    train.py       train: episodes on a set of kernels, checkpoints and resuming
    checkpoint.py  the agent's files, and the embedding model they were trained with
    curve.py       the training curve as JSON lines and as a plot
    env.py         PerfDojo-v0, the game as a gymnasium environment

Nothing here knows the hardware: the moves that a target cannot run are left out, and which
of the rest pay is learned from measured times alone. Importing this package imports nothing
heavy; torch, transformers and gymnasium come with the modules that need them.
"""
