import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { isAdmin, loadConfig, onSessionChange, signedIn, signIn, signOut, userId } from './api.js';
import { Action, ProblemView } from './ui.js';
import { WorldPage } from './world.js';
import { Worlds } from './worlds.js';

function SignIn() {
  const [token, setToken] = useState('');
  return (
    <main>
      <h1>Sign in</h1>
      <form class="stack" onSubmit={(e) => e.preventDefault()}>
        <label>
          API token (on a fresh stack: .onto/run/bootstrap-token)
          <input
            type="password"
            value={token}
            onInput={(e) => setToken(e.currentTarget.value)}
            autocomplete="off"
            name="apiToken"
          />
        </label>
        <Action label="Sign in" kind="primary" run={() => signIn(token)} testid="sign-in" />
      </form>
    </main>
  );
}

const route = () => location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);

function App() {
  const [, setVersion] = useState(0);
  const [path, setPath] = useState(route());
  const [configError, setConfigError] = useState<unknown>(undefined);
  useEffect(() => onSessionChange(() => setVersion((v) => v + 1)), []);
  useEffect(() => {
    const onHash = () => setPath(route());
    addEventListener('hashchange', onHash);
    loadConfig().catch(setConfigError);
    return () => removeEventListener('hashchange', onHash);
  }, []);
  const [first, world, tab, ...rest] = path;
  return (
    <>
      <header>
        <a href="#/" class="brand">
          onto console
        </a>
        {signedIn() ? (
          <span>
            {userId()}
            {isAdmin() ? ' (administrator)' : ''}{' '}
            <button
              type="button"
              onClick={() => {
                signOut();
                location.hash = '#/';
              }}
            >
              Sign out
            </button>
          </span>
        ) : null}
      </header>
      <ProblemView error={configError} />
      {!signedIn() ? (
        <SignIn />
      ) : first === 'w' && world ? (
        <WorldPage world={world} tab={tab || 'objects'} rest={rest} />
      ) : (
        <Worlds />
      )}
    </>
  );
}

render(<App />, document.getElementById('app') as HTMLElement);
